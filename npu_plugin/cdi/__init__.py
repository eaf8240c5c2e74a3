"""Everything CDI: names and spec rendering (`spec`, pure) and the spec files under --cdi-root
(`files`)."""

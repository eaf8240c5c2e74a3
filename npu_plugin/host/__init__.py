"""This machine's files, directories, sockets and boot: plumbing that knows nothing of NPUs."""

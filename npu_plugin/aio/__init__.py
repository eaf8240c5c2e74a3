"""asyncio building blocks: named, supervised tasks and the back-off policy of retried calls."""

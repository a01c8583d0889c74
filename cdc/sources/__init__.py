"""Source databases: connection, introspection of tables, and their types."""

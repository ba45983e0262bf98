"""Session backends: start the session agent as pid 1 of a fresh container or bubblewrap sandbox."""

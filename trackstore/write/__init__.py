"""The write path: a run's lifecycle (init, resume, join, finish, every ending of a process) and the writer thread."""

"""The ``fednsl`` command line. Each module here exporting ``command`` adds a subcommand."""

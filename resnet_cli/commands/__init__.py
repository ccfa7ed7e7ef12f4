"""One module per subcommand; importing a module registers its commands on `cli.app`."""

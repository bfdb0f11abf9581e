"""The daemon: TOML config, table discovery, one watch and schedule per table, a supervisor
that runs compactions under limits, metrics and systemd integration (root: ``app``)."""

"""The installed-wheel checks: build the wheel from a clean copy (:mod:`tests.smoke.wheel_build`) and run every
CLI subcommand against a non-editable install of it (:mod:`tests.smoke.cli_smoke`); see docs/packaging.md."""

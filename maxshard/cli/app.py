"""The Typer application every command group registers on."""

import typer

app = typer.Typer(
    help="maxshard: solve the IOPDDL auto-sharding problem (ASPLOS/EuroSys 2025 contest).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

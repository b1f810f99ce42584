"""`trainplan operator`: run the operator against the current cluster."""

from __future__ import annotations

import asyncio
import logging

import click

from trainplan.controller import ControllerContext, OperatorConfig, run_operator
from trainplan.planner import load_catalog


@click.command("operator")
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch only these namespaces (repeatable); default: every namespace.",
)
@click.option(
    "--liveness",
    default="http://0.0.0.0:8081/healthz",
    show_default=True,
    help="Liveness endpoint URL; empty to disable.",
)
@click.option(
    "--watch-timeout",
    "watch_timeout_seconds",
    type=float,
    default=OperatorConfig().watch_server_timeout_seconds,
    show_default=True,
    help="Seconds before the API server ends a watch (then re-list and re-watch).",
)
@click.option(
    "--request-timeout",
    "request_timeout_seconds",
    type=float,
    default=OperatorConfig().request_timeout_seconds,
    show_default=True,
    help="Seconds for one API request.",
)
@click.option(
    "--metrics-port",
    type=int,
    default=OperatorConfig().metrics_port,
    show_default=True,
    help="Port of the operator metrics (/metrics); 0 for any free port.",
)
@click.option(
    "--eta-interval",
    "eta_interval_seconds",
    type=float,
    default=OperatorConfig().eta_interval_seconds,
    show_default=True,
    help="Seconds between ETA revisions of each running plan.",
)
@click.option(
    "--prometheus-url",
    default=None,
    help="Read training metrics from this Prometheus server instead of scraping pods.",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def command(
    *,
    namespaces: tuple[str, ...],
    liveness: str,
    watch_timeout_seconds: float,
    request_timeout_seconds: float,
    metrics_port: int,
    eta_interval_seconds: float,
    prometheus_url: str | None,
    verbose: bool,
) -> None:
    """Run the trainplan operator (Kopf) with the in-cluster service account, or the
    current kubeconfig outside a cluster."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = OperatorConfig(
        watch_server_timeout_seconds=watch_timeout_seconds,
        watch_client_timeout_seconds=watch_timeout_seconds + 60,
        request_timeout_seconds=request_timeout_seconds,
        metrics_port=metrics_port,
        eta_interval_seconds=eta_interval_seconds,
        prometheus_url=prometheus_url,
    )
    context = ControllerContext(catalog=load_catalog(), config=config)
    asyncio.run(run_operator(context, namespaces=namespaces, liveness_endpoint=liveness or None))

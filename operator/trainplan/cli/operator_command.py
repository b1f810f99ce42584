"""`trainplan operator`: run the operator against the current cluster."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

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
    help="Liveness endpoint URL (its host is the address listened on); empty to disable.",
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
    "--metrics-address",
    default=OperatorConfig().metrics_address,
    show_default=True,
    help="Address the operator metrics server listens on (/metrics has no authentication).",
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
    "--budget-interval",
    "budget_interval_seconds",
    type=float,
    default=OperatorConfig().budget_interval_seconds,
    show_default=True,
    help="Seconds between revisions of each GPUBudget's figures.",
)
@click.option(
    "--prometheus-url",
    default=None,
    help="Read training metrics from this Prometheus server instead of scraping pods.",
)
@click.option(
    "--webhook-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve the GPU-budget admission webhook (HTTPS) on this port; default: no webhook.",
)
@click.option(
    "--webhook-address",
    default=OperatorConfig().webhook_address,
    show_default=True,
    help="Address the webhook server listens on.",
)
@click.option(
    "--webhook-host",
    default=None,
    help="Host name the API server calls the webhook at (e.g. SERVICE.NAMESPACE.svc).",
)
@click.option(
    "--webhook-cert-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=(
        "Directory with the webhook's tls.crt and tls.key (a mounted kubernetes.io/tls"
        " Secret, e.g. from cert-manager); default: a self-signed certificate."
    ),
)
@click.option(
    "--webhook-managed",
    metavar="NAME",
    default=None,
    help="Create and keep the ValidatingWebhookConfiguration NAME (development).",
)
@click.option(
    "--webhook-client-ca",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help=(
        "PEM bundle of the CA that signs the API server's client certificate: the webhook"
        " then refuses clients without a certificate signed by it."
    ),
)
@click.option(
    "--peering",
    "peering_name",
    metavar="NAME",
    default=None,
    help=(
        "Run as one of several replicas: the Kopf peering objects NAME (ClusterKopfPeering,"
        " or a KopfPeering in each watched namespace) elect one to work; the others stand"
        " by and serve the webhook. Default: standalone (one replica only)."
    ),
)
@click.option(
    "--peering-priority",
    type=click.IntRange(min=0, max=(1 << 53) - 1),
    default=None,
    help="This replica's peering priority (the highest works); default: the older, the higher.",
)
@click.option(
    "--peering-lifetime",
    "peering_lifetime_seconds",
    type=click.IntRange(min=1, max=3600),
    default=OperatorConfig().peering_lifetime_seconds,
    show_default=True,
    help="Seconds a peering record lives: a standby takes over this long after a leader dies.",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def command(
    *,
    namespaces: tuple[str, ...],
    liveness: str,
    watch_timeout_seconds: float,
    request_timeout_seconds: float,
    metrics_port: int,
    metrics_address: str,
    eta_interval_seconds: float,
    budget_interval_seconds: float,
    prometheus_url: str | None,
    webhook_port: int | None,
    webhook_address: str,
    webhook_host: str | None,
    webhook_cert_dir: Path | None,
    webhook_managed: str | None,
    webhook_client_ca: Path | None,
    peering_name: str | None,
    peering_priority: int | None,
    peering_lifetime_seconds: int,
    verbose: bool,
) -> None:
    """Run the trainplan operator (Kopf) with the in-cluster service account, or the
    current kubeconfig outside a cluster."""
    cert_path, key_path = webhook_certificate(webhook_cert_dir)
    if webhook_port is None and (
        webhook_cert_dir or webhook_managed or webhook_host or webhook_client_ca
    ):
        raise click.UsageError("the --webhook-* options need --webhook-port")
    if peering_name is None and peering_priority is not None:
        raise click.UsageError("--peering-priority needs --peering")
    if peering_name is not None and webhook_managed is not None:
        raise click.UsageError(
            "--webhook-managed writes each replica's own self-signed CA into the webhook"
            " configuration; with --peering, give every replica the same certificate"
            " (--webhook-cert-dir)"
        )
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = OperatorConfig(
        watch_server_timeout_seconds=watch_timeout_seconds,
        watch_client_timeout_seconds=watch_timeout_seconds + 60,
        request_timeout_seconds=request_timeout_seconds,
        metrics_port=metrics_port,
        metrics_address=metrics_address,
        eta_interval_seconds=eta_interval_seconds,
        budget_interval_seconds=budget_interval_seconds,
        prometheus_url=prometheus_url,
        webhook_port=webhook_port,
        webhook_address=webhook_address,
        webhook_host=webhook_host,
        webhook_cert_path=cert_path,
        webhook_key_path=key_path,
        webhook_managed=webhook_managed,
        webhook_client_ca_path=None if webhook_client_ca is None else str(webhook_client_ca),
        webhook_namespaces=tuple(namespaces),
        peering_name=peering_name,
        peering_priority=peering_priority,
        peering_lifetime_seconds=peering_lifetime_seconds,
    )
    context = ControllerContext(catalog=load_catalog(), config=config)
    asyncio.run(run_operator(context, namespaces=namespaces, liveness_endpoint=liveness or None))


def webhook_certificate(cert_dir: Path | None) -> tuple[str | None, str | None]:
    """The paths of `cert_dir`'s tls.crt and tls.key (the layout of a mounted
    kubernetes.io/tls Secret); (None, None) without a directory: self-signed."""
    if cert_dir is None:
        return None, None
    paths = (cert_dir / "tls.crt", cert_dir / "tls.key")
    missing = [path.name for path in paths if not path.is_file()]
    if missing:
        raise click.BadParameter(
            f"{cert_dir} has no {' or '.join(missing)} (a kubernetes.io/tls Secret's files)",
            param_hint="--webhook-cert-dir",
        )
    return str(paths[0]), str(paths[1])

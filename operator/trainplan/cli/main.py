"""`trainplan` entry point. Exit codes: 0 success, 2 invalid input, 3 no feasible plan,
130 interrupted (Ctrl-C).

Each subcommand lives in its own module, imported only when that command runs (or its
own help is asked for), so that a command pays only for what it uses: `plan` never
imports the operator stack (kopf, aiohttp), the dashboard SDK or torch, and
`trainplan --help` imports none of the commands. Each entry keeps the command's summary
(the first sentence of its help) for `trainplan --help`; a test checks that it matches.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click

INTERRUPTED_EXIT_CODE = 130
"""Exit status after Ctrl-C: 128 + SIGINT, the shell's convention."""


class LazyCommand(NamedTuple):
    """Where a subcommand lives (`module:attribute`) and its summary for the listing."""

    target: str
    summary: str


COMMANDS: dict[str, LazyCommand] = {
    "alerts": LazyCommand(
        "trainplan.cli.dashboard_command:alerts_command",
        "Write the Prometheus alert rules (rule groups YAML, the spec of a PrometheusRule): "
        "deadline at risk, stalled, restart storm, budget nearly exhausted and exhausted, "
        "operator down.",
    ),
    "crds": LazyCommand(
        "trainplan.cli.crds_command:command",
        "Write the TrainingPlan and GPUBudget CRDs (one YAML file each) to OUTPUT_DIR.",
    ),
    "dashboard": LazyCommand(
        "trainplan.cli.dashboard_command:dashboard_command",
        "Write the Grafana dashboard JSON (ETA, progress, speed, failures, GPUs, GPU-hours "
        "and budgets; a Prometheus data source variable, namespace and plan variables).",
    ),
    "eta": LazyCommand("trainplan.cli.eta_command:group", "The ETA engine on recorded runs."),
    "operator": LazyCommand(
        "trainplan.cli.operator_command:command",
        "Run the trainplan operator (Kopf) with the in-cluster service account, or the "
        "current kubeconfig outside a cluster.",
    ),
    "plan": LazyCommand(
        "trainplan.cli.plan_command:command",
        "Plan each TrainingPlan in FILES (whole resources or bare specs, YAML or JSON).",
    ),
    "serve": LazyCommand(
        "trainplan.cli.serve_command:command",
        "Size serving for the model in FILE (YAML or JSON: model, hardware, precision, "
        "requests, latency): the GPUs, tensor degree and batch that sustain the request rate "
        "within the latency targets.",
    ),
    "render": LazyCommand(
        "trainplan.cli.render_command:command",
        "Print every Kubernetes object the operator would create for each TrainingPlan in "
        "FILES (whole resources or bare specs, YAML or JSON): the headless Service, the "
        "DeepSpeed ConfigMap, the Indexed Job or JobSet.",
    ),
    "run": LazyCommand(
        "trainplan.cli.run_command:command",
        "Run the TrainingPlan in FILE locally: torchrun with NPROC CPU processes, restarted "
        "on failure, with a live ETA.",
    ),
}
"""Every subcommand, by name."""


def load_command(name: str) -> click.Command:
    """Import the module of the subcommand `name` and return the command."""
    module_name, attribute = COMMANDS[name].target.split(":")
    command = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(command, click.Command), f"{COMMANDS[name].target} is not a command"
    return command


class LazyGroup(click.Group):
    """A group whose subcommands in `COMMANDS` are imported on first use; the listing of
    `--help` shows their stored summaries without importing them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | COMMANDS.keys())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(load_command(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand; Ctrl-C before it handles signals itself (while its modules
        import, say) ends with one line and status 130, as `run` does, not click's
        "Aborted!" and status 1."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("trainplan: interrupted", err=True)
            ctx.exit(INTERRUPTED_EXIT_CODE)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = []
        for name in self.list_commands(ctx):
            loaded = self.commands.get(name)
            if loaded is not None:
                if loaded.hidden:
                    continue
                rows.append((name, loaded.get_short_help_str(limit)))
            else:
                summary = click.Command(name, help=COMMANDS[name].summary)
                rows.append((name, summary.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainplan")
def main() -> None:
    """Plan, launch and track GPU training jobs."""

"""The argument parser: kubectl's conventions (-n, --context, --kubeconfig, -o), one subcommand per verb."""

from __future__ import annotations

import argparse

import agentsession_api
import langchain_k8s_client
from agentsession_api.phases import IdleAction, Phase

EXAMPLES = """\
examples:
  kubectl agentsession list -n team-a -o wide
  kubectl agentsession create demo -n team-a --warm-pool python-pool --ttl 2h --idle-timeout 15m --wait
  kubectl agentsession exec demo -n team-a -- python3 -c 'print(6 * 7)'
  kubectl agentsession cp ./src demo:/workspace/src -n team-a
  kubectl agentsession cp demo:/workspace/out.txt ./out.txt -n team-a
  kubectl agentsession suspend demo -n team-a && kubectl agentsession resume demo -n team-a
  kubectl agentsession wait demo --for Ready --timeout 120 -n team-a
  kubectl agentsession delete demo -n team-a

exit codes: 0 success, 1 an error (message on stderr), 2 bad usage; exec exits with the command's code.
"""

PHASES = [str(p) for p in Phase]


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _common(default: str | None) -> argparse.ArgumentParser:
    """kubectl's global flags. Accepted before and after the verb; after it, the defaults are SUPPRESS so
    that a flag given before the verb is not reset by the subcommand's parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=default, help="the namespace (default: the context's)")
    common.add_argument("--context", default=default, help="the kubeconfig context to use")
    common.add_argument("--kubeconfig", default=default, help="path to the kubeconfig (default: $KUBECONFIG)")
    common.add_argument(
        "--request-timeout", type=float, default=default, help="seconds to wait for Ready (default 180)"
    )
    common.add_argument(
        "--pod-identity",
        choices=["token", "address"],
        default=default,
        help="how exec and cp know they reached the session's pod: its identity token (default), or its name "
        "and addresses alone (a template without the agentsession-pod-identity volume)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common, after_verb = _common(None), _common(argparse.SUPPRESS)

    parser = argparse.ArgumentParser(
        prog="kubectl agentsession",
        description="Manage AgentSessions (sandboxes for AI agents) and work in their pods.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {langchain_k8s_client.__version__} (agentsession-api {agentsession_api.__version__})",
    )
    parser.set_defaults(request_timeout=180.0)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, epilog: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog="example:\n  " + epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[after_verb],
        )

    p = add("list", "List AgentSessions.", "kubectl agentsession list -n team-a -l team=research -o wide")
    p.add_argument("-l", "--selector", help="label selector, e.g. team=research")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")

    p = add("get", "Show one AgentSession.", "kubectl agentsession get demo -n team-a -o yaml")
    p.add_argument("name")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")

    p = add(
        "create",
        "Create an AgentSession from flags.",
        "kubectl agentsession create demo --warm-pool python-pool --wait",
    )
    p.add_argument("name")
    p.add_argument("--warm-pool", help="the SandboxWarmPool to take a pod from")
    p.add_argument("--ttl", help="lifetime, e.g. 2h")
    p.add_argument("--idle-timeout", help="idle time before the idle action, e.g. 15m")
    p.add_argument("--idle-action", choices=[str(action) for action in IdleAction])
    p.add_argument("--env", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--label",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label of the AgentSession itself",
    )
    p.add_argument("--pod-label", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--storage", help="a 'workspace' volume of this size (e.g. 1Gi), mounted at /workspace")
    p.add_argument("--wait", action="store_true", help="wait until Ready (progress on stderr)")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide", "name"], help="output format")

    p = add(
        "exec",
        "Run a command in the session's pod; exits with its exit code.",
        "kubectl agentsession exec demo -- sh -c 'ls /workspace'",
    )
    p.add_argument("name")
    p.add_argument("--timeout", type=int, default=None, help="seconds before the command is killed (in the pod)")
    p.set_defaults(cmd=[])  # what follows `--`: split off before parsing (see parse)

    p = add(
        "cp",
        "Copy files or directories to or from a session (NAME:PATH on one side).",
        "kubectl agentsession cp ./dir demo:/workspace/dir",
    )
    p.add_argument("source")
    p.add_argument("destination")

    for verb, text in (
        ("suspend", "Suspend a session (spec.suspend=true): the pod goes, the volumes stay."),
        ("resume", "Resume a suspended session (spec.suspend=false)."),
    ):
        p = add(verb, text, f"kubectl agentsession {verb} demo --wait")
        p.add_argument("name")
        p.add_argument("--wait", action="store_true", help="wait for the resulting phase")

    p = add(
        "fork",
        "Create a session whose volumes are copies of another's (spec.forkFrom).",
        "kubectl agentsession fork demo demo-b --wait",
    )
    p.add_argument("name", help="the source session")
    p.add_argument("new_name", help="the fork")
    p.add_argument("--wait", action="store_true", help="wait until the fork is Ready")
    p.add_argument(
        "--suspend-source",
        action="store_true",
        help="suspend the source until the fork is Ready (an exact copy; a running source is copied "
        "crash-consistently), then resume it; implies --wait",
    )

    p = add(
        "delete",
        "Delete AgentSessions (their claims, pods and volumes go by garbage collection).",
        "kubectl agentsession delete demo other --ignore-not-found",
    )
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--ignore-not-found", action="store_true")

    p = add(
        "wait",
        "Wait until a session reaches a phase (exit 1 on timeout or a terminal phase).",
        "kubectl agentsession wait demo --for Ready --timeout 120",
    )
    p.add_argument("name")
    p.add_argument(
        "--for", dest="phase", default="Ready", choices=[*PHASES, "Deleted"], help="the phase (default Ready)"
    )
    p.add_argument("--timeout", type=float, default=180, help="seconds (default 180)")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse, with everything after the first `--` kept verbatim as the exec command (like kubectl exec)."""
    head, tail = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = build_parser()
    args = parser.parse_args(head)
    if tail and args.command != "exec":
        parser.error(f"only exec takes a command after --, not {args.command}")
    args.cmd = tail
    return args


def split_remote(spec: str) -> tuple[str | None, str]:
    """`NAME:PATH` -> (NAME, PATH); a local path (no colon before the first slash) -> (None, PATH)."""
    head, sep, tail = spec.partition(":")
    if sep and head and "/" not in head and not (len(head) == 1 and head.isalpha() and tail.startswith("\\")):
        return head, tail
    return None, spec

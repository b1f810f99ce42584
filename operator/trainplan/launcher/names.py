"""Names of the objects rendered for a TrainingPlan, and label values, within Kubernetes'
length and character rules.

A TrainingPlan's name is a DNS-1123 subdomain (up to 253 characters, dots allowed). The
objects made from it need more: a Service name is a DNS-1035 label (a letter first, at
most 63 characters, no dots), and every pod's hostname, `<job>-<index>` for an Indexed Job
or `<jobset>-node-0-<index>` for a JobSet, is a DNS-1123 label of at most 63 characters.
JobSet's admission webhook asks more still: the longest pod name of each replicated job,
`<jobset>-<replicated job>-<job index>-<pod index>` plus the 5-character random suffix
of a generated name (`-abcde`), must be a DNS-1035 label (kubernetes-sigs/jobset,
`pkg/webhooks/jobset_webhook.go`, `ValidateCreate`).

Rule (`job_name`): a plan name that already is a DNS-1035 label of at most
`MAX_JOB_NAME_LENGTH` (50) characters, or `MAX_JOBSET_NAME_LENGTH` (44) for a JobSet, is
used unchanged, so `kubectl get job <plan>` works. Any other name is shortened
deterministically: lower-cased, each run of characters other than letters and digits made
one `-`, prefixed `tp-` unless it starts with a letter, cut to fit, and suffixed with `-`
and the first 8 hex digits of the SHA-256 of the whole plan name, so two plans in a
namespace never share a job. 50 leaves room for the hostname suffix `-node-0-` and a
five-digit index (up to 100,000 nodes); 44 for that and JobSet's `-abcde`.

Label values (`label_value`) are at most 63 characters: a longer plan name is cut and
suffixed the same way.

Pure: standard library only.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

MAX_LABEL_LENGTH: Final = 63
"""Longest DNS-1123 / DNS-1035 label and longest label value (Kubernetes)."""

REPLICATED_JOB_NAME: Final = "node"
"""The name of the JobSet's one replicated job: each of its pods is one node."""

MAX_INDEX_DIGITS: Final = 5
"""Digits of the largest pod index the job names leave room for (99,999)."""

MAX_JOB_NAME_LENGTH: Final = MAX_LABEL_LENGTH - len(f"-{REPLICATED_JOB_NAME}-0-") - MAX_INDEX_DIGITS
"""Longest Job name: room for the pod hostname `<job>-node-0-<index>` (50)."""

GENERATED_SUFFIX_LENGTH: Final = len("-abcde")
"""The random suffix of a generated pod name, which JobSet's webhook counts in."""

MAX_JOBSET_NAME_LENGTH: Final = MAX_JOB_NAME_LENGTH - GENERATED_SUFFIX_LENGTH
"""Longest JobSet name: its longest pod name with the random suffix is a label (44)."""

_HASH_DIGITS: Final = 8
_DNS_1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:_HASH_DIGITS]


def job_name(plan_name: str, *, jobset: bool = False) -> str:
    """The name of the Job (or, with `jobset`, the JobSet), and of its headless Service,
    for a plan.

    The plan name itself when it is a DNS-1035 label of at most `MAX_JOB_NAME_LENGTH`
    (`MAX_JOBSET_NAME_LENGTH`) characters; otherwise a deterministic short form ending in
    a hash of the plan name (see the module docstring). Raises ValueError for an empty
    name.
    """
    if not plan_name:
        raise ValueError("a TrainingPlan needs a name (metadata.name) to name its job")
    longest = MAX_JOBSET_NAME_LENGTH if jobset else MAX_JOB_NAME_LENGTH
    if len(plan_name) <= longest and _DNS_1035_LABEL.fullmatch(plan_name):
        return plan_name
    base = re.sub(r"[^a-z0-9]+", "-", plan_name.lower()).strip("-")
    if not base[:1].isalpha():
        base = f"tp-{base}".rstrip("-")
    base = base[: longest - _HASH_DIGITS - 1].rstrip("-")
    return f"{base}-{_digest(plan_name)}"


def label_value(text: str) -> str:
    """`text` as a label value: unchanged when valid (<= 63 characters of letters, digits,
    `-`, `_`, `.`, alphanumeric at both ends), else cut and suffixed with a hash."""
    if len(text) <= MAX_LABEL_LENGTH and _LABEL_VALUE.fullmatch(text):
        return text
    base = re.sub(r"[^A-Za-z0-9_.]+", "-", text)
    base = base[: MAX_LABEL_LENGTH - _HASH_DIGITS - 1]
    base = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", base)
    return f"{base}-{_digest(text)}" if base else _digest(text)


def is_dns_label(name: str) -> bool:
    """A DNS-1123 label: lower-case letters, digits and `-`, alphanumeric ends, <= 63."""
    return len(name) <= MAX_LABEL_LENGTH and _DNS_1123_LABEL.fullmatch(name) is not None


def pod_hostname(job: str, index: int, *, jobset: bool) -> str:
    """The hostname of the pod with node rank `index`.

    Indexed Job: `<job>-<index>`. JobSet: `<jobset>-<replicated job>-<job index>-<index>`
    with one replicated job of one replica, i.e. `<jobset>-node-0-<index>`.
    """
    if jobset:
        return f"{job}-{REPLICATED_JOB_NAME}-0-{index}"
    return f"{job}-{index}"

"""What a running CodeBuild build shows the user: one line per phase change, and its log as it grows.

A CUDA image build takes 10–30 minutes; without output it looks hung, and when it fails
the reason is in a phase's ``contexts`` or in the last log lines. ``PhaseReport`` turns
each ``BatchGetBuilds`` answer into the lines not shown yet (pure); ``LogTail`` follows the
build's CloudWatch stream with ``GetLogEvents`` and ``nextForwardToken`` — the stream
appears only once the build is provisioned, so until then there is nothing to read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from speakwire.deploy.sagemaker.aws_errors import error_code

Log = Callable[[str], None]

# A failed phase and the permission of the CodeBuild *service role* it most likely lacked.
ROLE_PERMISSION_HINTS: Mapping[str, str] = {
    "PROVISIONING": "logs:CreateLogStream / logs:PutLogEvents on the build's log group",
    "DOWNLOAD_SOURCE": "s3:GetObject (and s3:GetObjectVersion) on the context object",
    "PRE_BUILD": "ecr:GetAuthorizationToken",
    "BUILD": "ecr:BatchCheckLayerAvailability, ecr:InitiateLayerUpload, ecr:UploadLayerPart, "
    "ecr:CompleteLayerUpload, ecr:PutImage on the repository (if the push was refused)",
}


def _clock_text(elapsed_s: float) -> str:
    minutes, seconds = divmod(int(elapsed_s), 60)
    return f"[{minutes:02d}:{seconds:02d}]"


@dataclass
class PhaseReport:
    """Remembers which phases were shown, so each poll prints only what changed."""

    shown_current: str | None = None
    finished: set[str] = field(default_factory=set)

    def lines(self, build: Mapping[str, Any], elapsed_s: float) -> list[str]:
        out: list[str] = []
        stamp = _clock_text(elapsed_s)
        for phase in build.get("phases", []):
            kind, status = phase.get("phaseType"), phase.get("phaseStatus")
            if not kind or not status or kind in self.finished or kind == "COMPLETED":
                continue
            self.finished.add(kind)
            text = f"{stamp} {kind}: {status}"
            if phase.get("durationInSeconds") is not None:
                text += f" ({phase['durationInSeconds']} s)"
            messages = [c.get("message", "") for c in phase.get("contexts", []) if c.get("message")]
            if status != "SUCCEEDED" and messages:
                text += " — " + "; ".join(messages)
            out.append(text)
        current = build.get("currentPhase")
        if current and current != self.shown_current and current not in self.finished and current != "COMPLETED":
            self.shown_current = current
            out.append(f"{stamp} {current} ...")
        return out


def failure_reason(build: Mapping[str, Any]) -> str:
    """Why a finished build did not succeed: its status, the failed phase, and what AWS said about it."""
    status = build.get("buildStatus", "UNKNOWN")
    for phase in build.get("phases", []):
        if phase.get("phaseStatus") not in (None, "SUCCEEDED"):
            kind = phase.get("phaseType", "?")
            messages = "; ".join(c.get("message", "") for c in phase.get("contexts", []) if c.get("message"))
            reason = f"build {status} in phase {kind}" + (f": {messages}" if messages else "")
            hint = ROLE_PERMISSION_HINTS.get(kind)
            if hint and ("denied" in messages.lower() or "not authorized" in messages.lower()):
                reason += f" (the CodeBuild service role may lack {hint})"
            return reason
    return f"build {status}"


@dataclass
class LogTail:
    """Follows one build's CloudWatch log stream; ``poll`` logs the lines that arrived since the last call."""

    logs_client: Any
    log: Log
    prefix: str = "  | "
    token: str | None = None
    group: str | None = None
    stream: str | None = None

    def poll(self, build: Mapping[str, Any]) -> int:
        """Read what is new; returns the number of lines logged. A missing stream (not yet created) reads as none."""
        where = build.get("logs") or {}
        if not self.group or not self.stream:
            self.group, self.stream = where.get("groupName"), where.get("streamName")
            if not self.group or not self.stream:
                return 0
        count = 0
        while True:
            request: dict[str, Any] = {
                "logGroupName": self.group,
                "logStreamName": self.stream,
                "startFromHead": True,
            }
            if self.token is not None:
                request["nextToken"] = self.token
            try:
                page = self.logs_client.get_log_events(**request)
            except ClientError as exc:
                if error_code(exc) == "ResourceNotFoundException":
                    return count
                raise
            for event in page.get("events", []):
                for line in str(event.get("message", "")).rstrip("\n").splitlines() or [""]:
                    self.log(self.prefix + line)
                    count += 1
            next_token = page.get("nextForwardToken")
            # The same token back means the end of the stream for now.
            if next_token is None or next_token == self.token:
                return count
            self.token = next_token

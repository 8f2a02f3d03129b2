"""Typed results of the agent tools and their compact text for an LLM (``str(result)``).

``to_dict()`` gives the JSON a ROS service or an MCP client returns beside
the text (e.g. FindExperiences' ``result_json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from emem_ros.agent.ledger import Experience
from emem_ros.tools.results import fmt_pos, fmt_time, quoted


@dataclass(frozen=True)
class ExperienceHit:
    experience: Experience
    score: Optional[float] = None
    """Fused relevance when the search ranked by meaning; None when it only filtered."""

    def line(self, now: float) -> str:
        e = self.experience
        outcome = {True: "succeeded", False: "failed", None: "outcome unknown"}[e.success]
        parts = [f"goal {quoted(e.goal, 160)}"]
        if e.action:
            parts.append(f"did {quoted(e.action, 160)}")
        if e.result:
            parts.append(f"result {quoted(e.result, 160)}")
        parts.append(outcome)
        if e.reflection:
            parts.append(f"learned {quoted(e.reflection, 200)}")
        text = "; ".join(parts)
        where = [fmt_time(e.stamp, now)]
        if e.position is not None:
            where.append(f"at {fmt_pos(e.position)}")
        if e.tags:
            where.append("tags " + ", ".join(e.tags))
        refs = [e.id[:12]]
        if e.episode_id:
            refs.append(e.episode_id)
        if e.supersedes:
            refs.append(f"corrects {e.supersedes[:12]}")
        if self.score is not None:
            refs.append(f"match {self.score:.3f}")
        return f"{text} ({', '.join(where)}) — {', '.join(refs)}"

    def to_dict(self) -> dict[str, Any]:
        e = self.experience
        return {
            "id": e.id, "goal": e.goal, "action": e.action, "result": e.result, "reflection": e.reflection,
            "success": e.success, "tags": list(e.tags), "metadata": e.metadata, "stamp": e.stamp,
            "episode_id": e.episode_id, "position": list(e.position) if e.position is not None else None,
            "supersedes": e.supersedes, "score": self.score,
        }


@dataclass
class ExperienceSearchResult:
    """Answer of find_experiences: records best first (or newest first without a query)."""

    summary: str
    hits: list[ExperienceHit]
    now: float
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.hits:
            lines = [f"No experience recorded matches {self.summary}."]
        else:
            noun = "experience" if len(self.hits) == 1 else "experiences"
            lines = [f"{len(self.hits)} {noun} for {self.summary}:"]
            lines += [f"{i}. {hit.line(self.now)}" for i, hit in enumerate(self.hits, 1)]
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __len__(self) -> int:
        return len(self.hits)

    def to_dict(self) -> list[dict[str, Any]]:
        return [hit.to_dict() for hit in self.hits]


@dataclass(frozen=True)
class RecordResult:
    """Answer of record_experience."""

    id: str
    goal: str
    success: Optional[bool]
    episode_id: Optional[str] = None

    def __str__(self) -> str:
        outcome = {True: "a success", False: "a failure", None: "outcome not given"}[self.success]
        episode = f" in {self.episode_id}" if self.episode_id else ""
        return (f"Recorded experience {self.id[:12]} ({outcome}{episode}): goal {quoted(self.goal, 120)}."
                f" Recording the same content again returns the same id.")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "goal": self.goal, "success": self.success, "episode_id": self.episode_id}

"""What a report says about a fault's releases, from every verdict known for its row: the run's
columns of the same engine and every bisect of the row (either direction). A maintainer's first
questions: a regression or there all along, and does the newest release still fail, or is it
already fixed?
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

# A release's verdict where it fails the row, but without the reported fault: finite outputs where
# the failing release's are NaN/Inf (issue 41, sweep 7 N7: 1.32.0 only 0.04 off, what float32 holds).
OTHER_FAULT = "fails otherwise"


def version_key(text: str):
    try:
        return (0, Version(text))
    except (InvalidVersion, TypeError):
        return (1, str(text))


@dataclass
class ReleaseHistory:
    version: str  # the failing cell's release
    verdicts: dict[str, str]  # release → its verdict on the row (pass, fail, error, …)

    @property
    def releases(self) -> list[str]:
        return sorted(self.verdicts, key=version_key)

    def good(self, version: str) -> bool:
        return self.verdicts[version] == "pass"

    def has_fault(self, version: str) -> bool:
        """Fails the row as the reported release does: not a pass, nor a failure of another kind."""
        return self.verdicts[version] not in ("pass", OTHER_FAULT)

    @property
    def last_good(self) -> str | None:
        """The newest release before the failing one that passes."""
        older = [v for v in self.releases if version_key(v) < version_key(self.version) and self.good(v)]
        return older[-1] if older else None

    @property
    def first_bad(self) -> str | None:
        """The oldest failing release after the last good one (the oldest tried where none is good)."""
        after = [v for v in self.releases if self.has_fault(v) and (self.last_good is None or
                                                                  version_key(v) > version_key(self.last_good))]
        return after[0] if after else None

    @property
    def fixed_in(self) -> str | None:
        """The oldest release after the failing one that passes."""
        newer = [v for v in self.releases if version_key(v) > version_key(self.version) and self.good(v)]
        return newer[0] if newer else None

    @property
    def gone_in(self) -> str | None:
        """The oldest release after the failing one without its fault, where none passes before it."""
        newer = [v for v in self.releases if version_key(v) > version_key(self.version) and not self.has_fault(v)]
        return newer[0] if newer and not self.good(newer[0]) else None

    @property
    def last_bad(self) -> str | None:
        end = self.fixed_in or self.gone_in
        before = [v for v in self.releases if self.has_fault(v) and (end is None or version_key(v) < version_key(end))]
        return before[-1] if before else None

    @property
    def regression(self) -> bool:
        return self.last_good is not None

    @property
    def newest_fails(self) -> bool:
        return self.has_fault(self.releases[-1])

    def sentences(self, product: str, fixed_words: str | None = None) -> list[str]:
        """`fixed_words`: what the tracker or release notes say of the fix, where the registry knows it."""
        tried = f"{len(self.releases)} release{'s' * (len(self.releases) != 1)} tried " \
                f"({self.releases[0]} to {self.releases[-1]})"
        if self.regression:
            said = [f"A regression: {product} {self.last_good} gives the right numbers, {self.first_bad} is the first "
                    f"release of the {tried} that does not."]
        else:
            said = [f"Present since the oldest of the {tried}, {self.releases[0]}: no older release tried gives the "
                    "right numbers."]
        if self.fixed_in:
            said.append(f"Already fixed: {product} {self.fixed_in} gives the right numbers (the last bad release "
                        f"tried: {self.last_bad})" + (f"; known upstream as fixed {fixed_words}" if fixed_words else "")
                        + ".")
        elif self.gone_in:
            said.append(f"Gone in {product} {self.gone_in}: its outputs are finite, though still outside the "
                        f"tolerance — a different matter (the last release tried with this fault: {self.last_bad}).")
        elif self.newest_fails:
            said.append(f"The newest release tried, {self.releases[-1]}, still fails.")
        return said

    def to_json(self) -> dict:
        return {"verdicts": self.verdicts, "regression": self.regression, "last_good": self.last_good,
                "first_bad": self.first_bad, "last_bad": self.last_bad, "fixed_in": self.fixed_in, "gone_in": self.gone_in,
                "newest_tried": self.releases[-1], "newest_fails": self.newest_fails}

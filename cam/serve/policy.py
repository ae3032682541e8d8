"""``cam.serve.ServePolicy``: how one FFN rank serves, decided and validated once against the topology.

Its one job is to hold the serving choices (row budget, graph, ``swiglu_limit``, weight format, items per check) and
to refuse a bad one before anything is built. The row-budget rule itself is C's (``host/src/dispatch_recv.cpp``,
asked through ``_C.dispatch_recv_check_row_budget``): this module never compares a budget, so the refusal a user
reads is the one the batched ``dispatch_recv`` gives. Importing it does not import torch (``cam-ffn --help``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Optional

__all__ = ["WEIGHT_FORMATS", "ServePolicy", "add_row_budget_flag", "check_items_per_check", "row_budget_bounds"]

# The routed experts' formats the GMM kernels serve (docs/gmm.md §9: w4a8 holds int4 values packed).
WEIGHT_FORMATS = ("w8a8", "w4a8")


def check_items_per_check(who: str, items) -> None:
    """Iterations (replays) between two reads of the store's messages, or replays of one graph step: an int >= 1."""
    if isinstance(items, bool) or not isinstance(items, int):
        raise TypeError(f"{who}: items must be an int >= 1 (the number of replays), got {items!r}")
    if items < 1:
        raise ValueError(f"{who}: items must be >= 1 (the number of replays), got {items}")


def row_budget_bounds(topology, row_budget: int, label: str = "row_budget") -> int:
    """The plane's largest useful batch on ``topology`` (the most rows one batched receive can ever take:
    ``min(D, 64)`` work items of ``recv_rows``), once C accepted ``row_budget``; a budget C refuses raises
    ValueError ``"<label> is below one work item's rows (<C's refusal>)"``, ``label`` naming the argument or flag
    as the caller's user wrote it."""
    if isinstance(row_budget, bool) or not isinstance(row_budget, int):
        raise TypeError(f"{label} must be an int (rows per batched receive), got {row_budget!r}")
    from .. import _C
    from ..errors import InvalidArgumentError

    try:
        return int(_C.dispatch_recv_check_row_budget(list(topology.as_c_fields()), row_budget))
    except InvalidArgumentError as e:  # the only rule aclnnCamDispatchRecvCheckRowBudget refuses by
        raise ValueError(f"{label} is below one work item's rows: {e}") from None


@dataclasses.dataclass(frozen=True)
class ServePolicy:
    """How an FFN rank serves; :meth:`validated` checks it against a topology once, before any buffer or launch.

    Attributes:
        row_budget: None serves one work item per iteration; an int serves batches of every ready work item that
            fits this many rows (one W1 and one W2 launch each). Bounded below by one work item's rows (C's rule)
            and above by the plane's largest useful batch: the receive is sized by :attr:`batch_rows`.
        graph: capture the iteration once and replay it instead of eager ops.
        swiglu_limit: W1's clamped SwiGLU (DeepSeek-V4), None for the plain SwiGLU.
        weights: the routed experts' format, one of :data:`WEIGHT_FORMATS`.
        items_per_check: iterations (replays) between two reads of the store's serving messages.
    """

    row_budget: Optional[int] = None
    graph: bool = False
    swiglu_limit: Optional[float] = None
    weights: str = "w8a8"
    items_per_check: int = 1
    largest_batch: Optional[int] = dataclasses.field(default=None, compare=False)  # set by validated()

    @property
    def batch_rows(self) -> Optional[int]:
        """The rows a batched receive is sized for: ``row_budget``, lowered to the plane's largest useful batch
        once :meth:`validated` learned it (rows beyond can never be filled); None serves one item per iteration."""
        if self.row_budget is None or self.largest_batch is None:
            return self.row_budget
        return min(self.row_budget, self.largest_batch)

    def __post_init__(self):
        if not isinstance(self.graph, bool):
            raise TypeError(f"ServePolicy: graph must be a bool, got {self.graph!r}")
        if self.weights not in WEIGHT_FORMATS:
            raise ValueError(f"ServePolicy: weights must be one of {WEIGHT_FORMATS}, got {self.weights!r}")
        from ..convert import check_swiglu_limit

        check_swiglu_limit("ServePolicy", self.swiglu_limit)
        if isinstance(self.items_per_check, bool) or not isinstance(self.items_per_check, int) \
                or self.items_per_check < 1:
            raise ValueError(f"ServePolicy: items_per_check must be an int >= 1, got {self.items_per_check!r}")
        if self.row_budget is not None and (isinstance(self.row_budget, bool) or
                                            not isinstance(self.row_budget, int)):
            raise TypeError(f"ServePolicy: row_budget must be an int (rows per batched receive), got "
                            f"{self.row_budget!r}")

    def validated(self, topology, label: Optional[str] = None) -> "ServePolicy":
        """This policy checked against ``topology`` (a :class:`cam.Topology`): a row budget C refuses raises
        ValueError naming ``label`` (default ``"row_budget = B"``); an accepted one learns the plane's largest
        useful batch (:attr:`batch_rows`)."""
        if self.row_budget is None:
            return self
        largest = row_budget_bounds(topology, self.row_budget,
                                    f"row_budget = {self.row_budget}" if label is None else label)
        return dataclasses.replace(self, largest_batch=largest)


class _Spelling(argparse.Action):
    """``--row-budget``, recording the spelling the user typed (refusals name it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_flag", option_string)


class _DeprecatedSpelling(_Spelling):
    """An old spelling of ``--row-budget``: still accepted, with a warning naming the new flag."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: warning: {option_string} is deprecated: use --row-budget (same meaning)",
              file=sys.stderr)
        super().__call__(parser, namespace, values, option_string)


def add_row_budget_flag(parser, *, help: str, default: Optional[int] = None, deprecated=(),
                        dest: str = "row_budget") -> None:
    """``--row-budget ROWS`` on a command line (cam-ffn, cam-run, cam-sim), and its old spellings ``deprecated``
    (each warns, naming ``--row-budget``). ``args.<dest>_flag`` is the spelling the user typed (for refusals that
    name it), ``--row-budget`` when none was."""
    parser.add_argument("--row-budget", type=int, default=default, dest=dest, action=_Spelling, metavar="ROWS",
                        help=help)
    for old in deprecated:
        parser.add_argument(old, type=int, dest=dest, action=_DeprecatedSpelling, metavar="ROWS",
                            default=argparse.SUPPRESS, help="deprecated spelling of --row-budget")
    parser.set_defaults(**{dest + "_flag": "--row-budget"})

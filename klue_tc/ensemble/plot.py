"""ensemble.png: every candidate's fold ensemble on the validation titles beside the ensemble, the
chosen ones drawn by their weight, so that a reader sees at a glance what it is made of and by how
much it clears its members and the linear baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from klue_tc.ensemble.members import LINEAR
from klue_tc.ensemble.stage import Ensemble

PLOT_FILE = "ensemble.png"


def plot_ensemble(ensemble: Ensemble, path: Path) -> Optional[Path]:
    """Horizontal bars, best candidate on top: validation macro-F1 of each fold ensemble (linear
    baselines in their own colour), bar opacity by selection weight, the ensemble a line with its
    interval. None where nothing was scored on validation titles."""
    scored = ensemble.validation
    if scored is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from klue_tc.core.figures import hangul_text, save_figure

    weights = ensemble.weights
    rows = sorted(
        ((m, scored.members[m.key]) for m in ensemble.members if m.key in scored.members), key=lambda row: row[1]
    )
    top = max(weights.values()) or 1.0
    with hangul_text():
        fig = Figure(figsize=(8, 1.6 + 0.22 * len(rows)))
        ax = fig.add_subplot()
        for y, (member, f1) in enumerate(rows):
            chosen = weights[member.key] > 0
            colour = "tab:orange" if member.kind == LINEAR else "tab:blue"
            ax.barh(y, f1, color=colour, alpha=0.25 + 0.75 * weights[member.key] / top if chosen else 0.12)
            label = f"{weights[member.key]:.2f}" if chosen else ""
            ax.text(f1, y, f" {label}", va="center", fontsize=7)
        ax.axvline(scored.f1, color="black", linewidth=1.2)
        ax.axvspan(scored.low, scored.high, color="black", alpha=0.08)
        ax.set_yticks(range(len(rows)), [member.name for member, _ in rows], fontsize=7)
        low = min(f1 for _, f1 in rows)
        ax.set_xlim(max(0.0, low - 0.05), min(1.0, scored.high + 0.02))
        ax.set_xlabel("validation macro-F1 (each candidate's fold ensemble)")
        ax.set_title(
            f"the ensemble: {scored.f1:.3f} (line, its 95 % interval shaded)\n"
            "bars: each candidate, darker for more weight (the number); orange: linear baselines",
            fontsize=8,
        )
        fig.tight_layout()
        return save_figure(fig, path)

"""Digital-rock permeability: protocol set-ups, the k tensor, time-to-answer and previews.

:mod:`.settings` holds the user's choices (case-file section ``permeability:``), :mod:`.protocol`
turns a sample into the simulations a protocol runs, :mod:`.measure` runs them to a converged k
along one or more axes, :mod:`.preview` prices crop/downsample choices before a run.
"""

from __future__ import annotations

from .measure import AxisResult, PermeabilityStudy, measure_axis, run_study
from .preview import PreviewChoice, preview_choices
from .protocol import PROTOCOLS, ProtocolSetup, setup_protocol
from .settings import PermeabilitySettings

__all__ = ["AxisResult", "PermeabilitySettings", "PermeabilityStudy", "PreviewChoice",
           "PROTOCOLS", "ProtocolSetup", "measure_axis", "preview_choices", "run_study",
           "setup_protocol"]

"""Dashboard views: each one watches the session's Controller and renders one aspect of it.

Importing the package selects HoloViews' Bokeh backend, which the views' plot options need.
"""

from __future__ import annotations

import holoviews as hv

hv.renderer("bokeh")
hv.Store.set_current_backend("bokeh")

__all__: list[str] = []

"""The Geometry tab: the store's views laid out, the openings table and "Use this geometry".

The tab's state and actions live in one :class:`~.geometry_store.GeometryStore`; the views read
it: where the geometry comes from (:mod:`.geometry_source`, :mod:`.upload_view`), its preview
(:mod:`.geometry_preview`), the openings in 3D (:mod:`.openings_preview3d`) and the openings
table (:mod:`.openings_panel`), which this module binds to the previewed (then the used)
geometry. Nothing is allocated on the device until the user presses "Use this geometry".
"""

from __future__ import annotations

import panel as pn
import param

from solver.lattice_parameters import choose_lattice, demand_of_specs
from solver.values import ConfigError

from ..case_export import case_document, case_yaml
from ..controller import Controller
from ..geometry_sources import GeometryPreview
from ..openings import OpeningGroup, OpeningUnits, drives, si_specs
from ..settings import Settings
from .geometry_preview import PreviewView, preview_image
from .geometry_source import SourceChooser
from .geometry_store import GeometryStore, memory_verdict
from .openings_panel import OpeningsPanel
from .openings_preview3d import OpeningsPreview3D
from .physics_panel import PhysicalSetup
from .upload_view import FORMATS_TEXT, UploadView

__all__ = ["FORMATS_TEXT", "GeometryPanel", "memory_verdict"]


class GeometryPanel(pn.viewable.Viewer):
    """Geometry source selection, preview, openings and the "Use this geometry" action."""

    store = param.ClassSelector(class_=GeometryStore, doc="The tab's state and actions.")

    def __init__(self, controller: Controller, settings: Settings,
                 setup: PhysicalSetup | None = None, **params) -> None:
        store = GeometryStore(controller, settings)
        super().__init__(store=store, **params)
        self.controller, self.settings = controller, settings
        # The fluid and the physical units the openings' SI values are read in (Physics tab).
        self.setup = setup or PhysicalSetup(name="Physical setup")
        self.openings = OpeningsPanel(self._opening_units, chooser=self._lattice_choice)
        self._narrowings: dict = {}  # per geometry: the narrowest sections already measured
        self.setup.param.watch(self.openings.refresh, ["voxel_size_um", "viscosity", "density"])
        self.upload_view = UploadView(store, settings)
        self.source_view = SourceChooser(store, self.upload_view)
        self.preview_view = PreviewView(store)
        self.preview3d = OpeningsPreview3D()
        self._recolour = None  # the watcher that recolours the 3D openings on table edits
        self.use_button = pn.widgets.Button(name="Use this geometry", button_type="success",
                                            disabled=pn.bind(lambda ok: not ok,
                                                             store.param.usable))
        self.use_button.on_click(self._use_clicked)

    def __panel__(self) -> pn.viewable.Viewable:
        drive = pn.widgets.Select.from_param(self.store.param.drive, width=320)
        result = pn.Column(self.preview_view, self.preview3d, drive, self.openings,
                           self.use_button, sizing_mode="stretch_width")
        return pn.Row(self.source_view, result, sizing_mode="stretch_width")

    # ------------------------------------------------------------------ the store's parts
    # (what tests, the dashboard and notebooks reach through the panel)
    preview = property(lambda self: self.store.preview,
                       lambda self, value: setattr(self.store, "preview", value))
    source = property(lambda self: self.store.source,
                      lambda self, value: setattr(self.store, "source", value))
    sample = property(lambda self: self.store.sample,
                      lambda self, value: setattr(self.store, "sample", value))
    drive = property(lambda self: self.store.drive,
                     lambda self, value: setattr(self.store, "drive", value))
    upload_options = property(lambda self: self.store.upload_options)
    used_recipe = property(lambda self: self.store.used_recipe)
    file_input = property(lambda self: self.upload_view.file_input)
    alert = property(lambda self: self.preview_view.alert)
    info = property(lambda self: self.preview_view.info)
    image = property(lambda self: self.preview_view.image)
    _image = staticmethod(preview_image)

    async def _preview_clicked(self, event) -> None:
        await self.store.preview_source()

    def _use_clicked(self, event) -> None:
        self.store.use()

    def _memory(self, preview: GeometryPreview) -> tuple[str, str]:
        return self.store.memory(preview)

    # ------------------------------------------------------------------ reactions
    @param.depends("store.preview", watch=True)
    def _preview_changed(self) -> None:
        """Bind the openings table and the 3D openings to the new preview (or clear them)."""
        preview = self.store.preview
        if preview is None:
            self.openings.bind((), None)
            self.preview3d.clear()
            return
        self.openings.bind(preview.groups, preview.config, preview.geometry)
        self.preview3d.show(preview.geometry, preview.config.openings)
        self._follow_kinds(preview.config)

    @param.depends("store.used", watch=True)
    def _used(self) -> None:
        """From now on the rows edit the session's pending settings (Apply settings)."""
        preview = self.store.preview
        self.openings.bind(preview.groups, self.controller.config, preview.geometry)

    def _follow_kinds(self, config) -> None:
        """Recolour the 3D openings when the table edits ``config.openings`` (before Use)."""
        if self._recolour is not None:
            self._recolour[0].param.unwatch(self._recolour[1])
        watcher = config.param.watch(lambda e: self.preview3d.recolour(e.new), "openings")
        self._recolour = (config, watcher)

    # ------------------------------------------------------------------ case and units
    def case_text(self) -> str:
        """The session's run as a case file (YAML, openings by id in SI)."""
        if self.store.used_recipe is None:
            raise ConfigError("A case file needs a geometry from Sample or Upload used with "
                              "“Use this geometry”; a generated geometry is saved as a case "
                              "with `geometry: {generator: ..., parameters: ...}` by hand.")
        config = self.controller.applied_config
        geometry = self.controller.geometry
        units = self.setup.units(config.tau, geometry.voxel_size)
        name = (geometry.name or "dashboard").rsplit(".", 1)[0]
        return case_yaml(case_document(name, self.store.used_recipe, config, units,
                                       self.setup.viscosity, self.setup.density))

    def _lattice_choice(self, config, groups, geometry, tau):
        """The lattice parameters of the openings' SI values on ``geometry``
        (:func:`solver.lattice_parameters.choose_lattice`), None without a driven opening."""
        listed = [config.openings[g.ids[0]] for g in groups if g.ids[0] in config.openings]
        if geometry is None or not any(drives(spec["kind"]) for spec in listed):
            return None
        units = OpeningUnits(self.setup.units(config.tau, geometry.voxel_size),
                             config.initial_density)
        specs = si_specs(config.openings, groups, units)
        cache = self._narrowings.setdefault(id(geometry), {})
        if len(self._narrowings) > 4:  # previews come and go: keep the latest few
            self._narrowings.pop(next(iter(self._narrowings)))
        demand = demand_of_specs(specs, geometry, self.setup.viscosity, self.setup.density,
                                 geometry.voxel_size or self.setup.voxel_size_um * 1e-6,
                                 cache=cache)
        device = str((self.controller.snapshot.device or {}).get("name", "CPU"))
        return choose_lattice(demand, tau=tau, precision=config.precision,
                              backend="numpy" if device.startswith("CPU") else "cupy",
                              collision=config.collision)

    def _opening_units(self, config, group: OpeningGroup) -> OpeningUnits:
        """SI <-> lattice units of an opening of the previewed (or used) geometry."""
        return OpeningUnits(self.setup.units(config.tau, group.voxel_size),
                            config.initial_density)

"""Give back each WebGL context vtk.js stops using, at once: the page never runs out of them.

Panel's synchronised VTK pane replaces its vtk.js render window, and with it the canvas and its
WebGL context, on every scene sync (the 3D view's every few seconds, the geometry preview's on
every change). vtk.js deletes the old window but never releases its context, so the contexts
stay alive until the browser collects their canvases. Chromium keeps at most 16 alive per page
and, past that, forcibly loses the least recently drawn one ("Too many active WebGL contexts.
Oldest context will be lost."): measured in headless Chromium with a sync every 2 s, one forced
loss per sync from the 17th on, the hidden geometry preview's context among them; which
context goes depends on garbage collection.
:class:`WebGLRelease`, placed once in the page, makes every vtk.js OpenGL render window lose its
context (``WEBGL_lose_context``) when it is deleted, so a page holds one context per VTK view.
"""

from __future__ import annotations

from panel.custom import JSComponent

__all__ = ["WebGLRelease"]


class WebGLRelease(JSComponent):
    """An invisible component whose script wraps vtk.js's OpenGL render window so that its
    deletion releases its WebGL context (once per page; the windows made before it keep
    theirs)."""

    _esm = """
export function render({ el }) {
  // vtk.js is loaded with the page's VTK panes; wait for it if this runs first.
  let tries = 0
  const install = () => {
    const opengl = window.vtk && window.vtk.Rendering && window.vtk.Rendering.OpenGL
    const windows = opengl && opengl.vtkRenderWindow
    if (!windows) {
      if (tries++ < 100) setTimeout(install, 100)
      return
    }
    el.dataset.released = "ready"
    if (windows.releasesContext) return
    // vtk.js freezes its objects once built: wrap `delete` while the window is built.
    const extend = windows.extend
    windows.newInstance = window.vtk.macro.newInstance((publicAPI, model, initial = {}) => {
      extend(publicAPI, model, initial)
      const remove = publicAPI.delete
      publicAPI.delete = (...rest) => {
        const gl = model.context
        const out = remove(...rest)
        const lose = gl && !gl.isContextLost() ? gl.getExtension("WEBGL_lose_context") : null
        if (lose) {
          lose.loseContext()
          window.porousLbmReleasedContexts = (window.porousLbmReleasedContexts || 0) + 1
        }
        return out
      }
    }, "vtkOpenGLRenderWindow")
    windows.releasesContext = true
  }
  install()
}
"""

    def __init__(self, **params) -> None:
        params.setdefault("height", 0)
        params.setdefault("width", 0)
        params.setdefault("margin", 0)
        super().__init__(**params)

// Mouse and keyboard on the timeline canvas, forwarded to the view controller `v`:
//  wheel: zoom in time at the cursor; ctrl+wheel: zoom the rank axis at the cursor;
//  shift+wheel: scroll the rows; drag: pan; shift+drag: select a window;
//  W/S: zoom in/out at the centre, A/D: pan left/right (as in Perfetto);
//  move: hover tooltip; click: details of the event (or expand a rank from its label).
// Coordinates passed to `v` are CSS px relative to the canvas.

const DRAG_PX = 4;

export function attach(canvas, v) {
  let drag = null;  // {x0, y0, x, start, end, select, moved}
  const pos = (e) => {
    const r = canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };

  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const p = pos(e);
    const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
    if (e.ctrlKey || e.metaKey) v.rankZoom(p.y, Math.exp(dy * 0.002));
    else if (e.shiftKey) v.scrollRows(dy);
    else if (Math.abs(e.deltaX) > Math.abs(dy)) v.panPx(e.deltaX);
    else v.zoomAt(p.x, Math.exp(dy * 0.002));
  }, { passive: false });

  canvas.addEventListener("pointerdown", (e) => {
    if (e.button !== 0) return;
    const p = pos(e);
    canvas.setPointerCapture(e.pointerId);
    drag = { x0: p.x, y0: p.y, x: p.x, select: e.shiftKey, moved: false };
    canvas.focus();
  });

  canvas.addEventListener("pointermove", (e) => {
    const p = pos(e);
    if (!drag) { v.hover(p.x, p.y); return; }
    if (Math.abs(p.x - drag.x0) > DRAG_PX || Math.abs(p.y - drag.y0) > DRAG_PX) drag.moved = true;
    if (!drag.moved) return;
    if (drag.select) {
      v.selecting(drag.x0, p.x);
    } else {
      canvas.classList.add("dragging");
      v.panPx(drag.x - p.x);
      v.scrollRows(drag.y0 - p.y);
      drag.y0 = p.y;
    }
    drag.x = p.x;
    v.hover(-1, -1);
  });

  const end = (e) => {
    if (!drag) return;
    const p = pos(e);
    canvas.classList.remove("dragging");
    if (drag.select && drag.moved) v.selectDone(drag.x0, p.x);
    else if (!drag.moved) v.click(p.x, p.y);
    drag = null;
  };
  canvas.addEventListener("pointerup", end);
  canvas.addEventListener("pointercancel", () => { drag = null; canvas.classList.remove("dragging"); });
  canvas.addEventListener("pointerleave", () => { if (!drag) v.hover(-1, -1); });

  window.addEventListener("keydown", (e) => {
    const tag = (e.target && e.target.tagName) || "";
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    const k = e.key.toLowerCase();
    if (k === "w") v.zoomCentre(0.8);
    else if (k === "s") v.zoomCentre(1.25);
    else if (k === "a") v.panFraction(-0.2);
    else if (k === "d") v.panFraction(0.2);
    else if (k === "escape") v.clearSelection();
    else return;
    e.preventDefault();
  });
}

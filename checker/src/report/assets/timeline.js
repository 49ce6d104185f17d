// Renders the history embedded as JSON: one track per process, one bar per operation
// from its invoke to its completion, faults shaded, ops named by a failing check outlined.
(function () {
  const data = JSON.parse(document.getElementById("data").textContent);
  document.getElementById("title").textContent = data.title;
  const verdict = document.getElementById("verdict");
  verdict.textContent = "verdict: " + data.verdict;
  verdict.className = data.verdict_class;
  document.getElementById("explanation").textContent = data.explanation || "(no failure)";
  const width = Math.max(900, 1400);
  const labelWidth = 110;
  const start = data.start_ns, end = Math.max(data.end_ns, start + 1);
  const x = (t) => labelWidth + 10 + ((t - start) / (end - start)) * width;
  const root = document.getElementById("timeline");
  root.style.width = (labelWidth + width + 20) + "px";
  const tooltip = document.getElementById("tooltip");
  const show = (text, ev) => {
    tooltip.textContent = text;
    tooltip.style.display = "block";
    tooltip.style.left = (ev.clientX + 12) + "px";
    tooltip.style.top = (ev.clientY + 12) + "px";
  };
  const hide = () => { tooltip.style.display = "none"; };
  for (const f of data.faults) {
    const div = document.createElement("div");
    div.className = "fault";
    div.style.left = x(f.start_ns) + "px";
    div.style.width = Math.max(2, x(f.end_ns) - x(f.start_ns)) + "px";
    div.addEventListener("mousemove", (ev) => show(f.text, ev));
    div.addEventListener("mouseleave", hide);
    root.appendChild(div);
  }
  let firstError = null;
  for (const process of data.processes) {
    const track = document.createElement("div");
    track.className = "track";
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = "process " + process;
    track.appendChild(label);
    for (const op of data.ops.filter((o) => o.process === process)) {
      const div = document.createElement("div");
      div.className = "op " + op.class + (op.marked ? " marked" : "");
      const right = op.return_ns === null ? end : op.return_ns;
      div.style.left = x(op.call_ns) + "px";
      div.style.width = Math.max(3, x(right) - x(op.call_ns)) + "px";
      div.textContent = (op.order === null ? "" : "#" + op.order + " ") + op.label;
      if (op.marked && (firstError === null || op.call_ns < firstError.call_ns)) {
        firstError = { call_ns: op.call_ns, div: div };
      }
      div.addEventListener("mousemove", (ev) => show(op.detail, ev));
      div.addEventListener("mouseleave", hide);
      track.appendChild(div);
    }
    root.appendChild(track);
  }
  // "Jump to the first error": the earliest op a failing check names.
  const jump = document.getElementById("jump");
  if (firstError !== null) {
    firstError.div.id = "first-error";
    jump.href = "#first-error";
    jump.style.display = "inline";
    jump.addEventListener("click", (ev) => {
      ev.preventDefault();
      firstError.div.scrollIntoView({ behavior: "smooth", block: "center", inline: "center" });
    });
  }
})();

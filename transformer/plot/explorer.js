// The attention explorer's script (transformer/plot/explorer.py). It draws every
// explorer of the page that is not drawn yet, from the JSON beside it, and
// loads nothing. No modules and no require.js, so it runs wherever the HTML is
// inserted: a file, classic Notebook, JupyterLab.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  // One colour per head (Tableau 10, then darker shades).
  var COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac", "#2f4b7c", "#a05195", "#d45087", "#665191", "#003f5c",
    "#ffa600"];
  // Rows, the token columns, the lines between them and the weights' margins, in px.
  var ROW = 22, TOP = 30, LABEL = 130, GAP = 170, VALUE = 36, MIN_WEIGHT = 0.01;
  var LEFT = VALUE + LABEL, RIGHT = LEFT + GAP, WIDTH = RIGHT + LABEL + VALUE;

  function color(head) { return COLORS[head % COLORS.length]; }

  function el(tag, attrs, parent, ns) {
    var node = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (name === "text") node.textContent = attrs[name];
      else node.setAttribute(name, attrs[name]);
    });
    if (parent) parent.appendChild(node);
    return node;
  }

  function decode(kind) {
    var bytes = atob(kind.weights), out = new Float32Array(bytes.length);
    for (var i = 0; i < bytes.length; i++) out[i] = bytes.charCodeAt(i) / kind.levels;
    kind.w = out;
    kind.at = function (layer, head, q, k) {
      var nq = kind.queries.length, nk = kind.keys.length;
      return out[((layer * kind.heads + head) * nq + q) * nk + k];
    };
  }

  function hint(kind) {
    var q = kind.querySide, k = kind.keySide;
    var text = "Left: the " + q + " tokens, the queries; right: the " + k + " tokens, the keys. " +
      "A line joins a query to a key it attends to, as thick as its weight; each head's " +
      "weights of one query sum to 1. Hover a token to see only its lines, click it to keep them.";
    if (kind.name.indexOf("block1") >= 0) text += " The look-ahead mask lets a query see " +
      "only the tokens up to its own position.";
    if (q === "target") text += " A target row is named by the token its position predicts.";
    return text;
  }

  function init(root) {
    if (!root || root.getAttribute("data-txe-ready")) return;
    var holder = root.querySelector(".txe-data") || root.querySelector('script[type="application/json"]');
    if (!holder) return;
    var data = JSON.parse(holder.textContent);
    root.setAttribute("data-txe-ready", "1");
    root.querySelector(".txe-noscript").style.display = "none";
    data.kinds.forEach(decode);
    var state = { kind: 0, layer: 0, heads: [], focus: null, pinned: false, cell: null };
    var controls = root.querySelector(".txe-controls");
    var headView = root.querySelector(".txe-head-view");
    var modelView = root.querySelector(".txe-model-view");

    var kindLabel = el("label", { text: "attention" }, controls);
    var kindSelect = el("select", { "class": "txe-kind" }, kindLabel);
    data.kinds.forEach(function (kind, i) { el("option", { value: i, text: kind.title }, kindSelect); });
    var layerLabel = el("label", { text: "layer" }, controls);
    var layerSelect = el("select", { "class": "txe-layer" }, layerLabel);
    var headsBox = el("span", { "class": "txe-heads" }, controls);

    function kind() { return data.kinds[state.kind]; }

    function setKind(index) {
      state.kind = index; state.focus = null; state.pinned = false;
      var k = kind();
      state.layer = Math.min(state.layer, k.layers - 1);
      state.heads = [];
      for (var h = 0; h < k.heads; h++) state.heads.push(true);
      state.cell = null;
      kindSelect.value = String(index);
      layerSelect.innerHTML = "";
      for (var l = 0; l < k.layers; l++) el("option", { value: l, text: String(l + 1) }, layerSelect);
      layerSelect.value = String(state.layer);
      root.querySelector(".txe-hint").textContent = hint(k);
      drawToggles(); drawModel(); drawHead();
    }

    function drawToggles() {
      headsBox.innerHTML = "";
      el("span", { text: "heads", style: "font-size:13px;color:#4b5563" }, headsBox);
      state.heads.forEach(function (on, h) {
        var button = el("button", { "class": "txe-head-toggle" + (on ? "" : " txe-off"),
          style: "--c:" + color(h), "data-head": h, title: "show or hide head " + (h + 1),
          text: String(h + 1) }, headsBox);
        button.addEventListener("click", function () {
          state.heads[h] = !state.heads[h]; state.cell = null; drawToggles(); drawHead(); markCell();
        });
      });
      var all = el("button", { "class": "txe-small-button", text: "all" }, headsBox);
      all.addEventListener("click", function () {
        state.heads = state.heads.map(function () { return true; });
        state.cell = null; drawToggles(); drawHead(); markCell();
      });
    }

    function tokenColumn(svg, tokens, side, x, anchor) {
      tokens.forEach(function (token, i) {
        var g = el("g", { "class": "txe-token-group", "data-side": side, "data-index": i }, svg, true);
        el("rect", { "class": "txe-token-box", x: anchor === "end" ? x - LABEL + 4 : x - 4,
          y: TOP + i * ROW, width: LABEL, height: ROW, rx: 3 }, g, true);
        el("text", { "class": "txe-token", x: x, y: TOP + i * ROW + ROW / 2 + 4,
          "text-anchor": anchor, text: token }, g, true);
        g.addEventListener("mouseenter", function () { if (!state.pinned) focus(side, i); });
        g.addEventListener("mouseleave", function () { if (!state.pinned) focus(null); });
        g.addEventListener("click", function () {
          var same = state.pinned && state.focus && state.focus.side === side && state.focus.index === i;
          state.pinned = !same; focus(same ? null : side, i);
        });
      });
    }

    function focus(side, index) {
      state.focus = side === null ? null : { side: side, index: index };
      headView.querySelectorAll(".txe-token-group").forEach(function (g) {
        var f = state.focus;
        g.classList.toggle("txe-focus", Boolean(f && g.getAttribute("data-side") === f.side &&
          Number(g.getAttribute("data-index")) === f.index));
      });
      drawLines();
    }

    function drawHead() {
      var k = kind(), nq = k.queries.length, nk = k.keys.length;
      var left = LEFT, right = RIGHT, width = WIDTH;
      var height = TOP + Math.max(nq, nk) * ROW + 6;
      headView.innerHTML = "";
      var svg = el("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height,
        "class": "txe-head-svg", "data-layer": state.layer }, headView, true);
      el("text", { "class": "txe-column-title", x: left - 4, y: 16, "text-anchor": "end",
        text: "queries (" + k.querySide + ")" }, svg, true);
      el("text", { "class": "txe-column-title", x: right + 4, y: 16,
        text: "keys (" + k.keySide + ")" }, svg, true);
      el("g", { "class": "txe-lines" }, svg, true);
      tokenColumn(svg, k.queries, "q", left - 6, "end");
      tokenColumn(svg, k.keys, "k", right + 6, "start");
      drawLines();
    }

    // The lines of the visible heads; with a focused token, only its lines.
    function drawLines() {
      var k = kind(), nq = k.queries.length, nk = k.keys.length;
      var left = LEFT, right = RIGHT;
      var lines = headView.querySelector(".txe-lines");
      lines.innerHTML = "";
      var f = state.focus;
      var shown = state.heads.filter(Boolean).length;
      state.heads.forEach(function (on, h) {
        if (!on) return;
        for (var q = 0; q < nq; q++) {
          if (f && f.side === "q" && f.index !== q) continue;
          for (var j = 0; j < nk; j++) {
            if (f && f.side === "k" && f.index !== j) continue;
            var w = k.at(state.layer, h, q, j);
            if (w < MIN_WEIGHT) continue;
            var line = el("line", { "class": "txe-line", x1: left + 2, y1: TOP + q * ROW + ROW / 2,
              x2: right - 2, y2: TOP + j * ROW + ROW / 2, stroke: color(h),
              "stroke-width": (0.6 + 5 * w).toFixed(2), "stroke-opacity": (0.12 + 0.78 * w).toFixed(2),
              "stroke-linecap": "round", "data-head": h, "data-q": q, "data-k": j }, lines, true);
            el("title", { text: "head " + (h + 1) + ": " + k.queries[q] + " \u2192 " + k.keys[j] +
              "  " + w.toFixed(2) }, line, true);
            if (f && shown === 1) {  // one head: its weights beside the tokens they go to
              var toKeys = f.side === "q", index = toKeys ? j : q;
              var label = headView.querySelector('.txe-token-group[data-side="' +
                (toKeys ? "k" : "q") + '"][data-index="' + index + '"] text');
              var offset = 12 + (label ? label.getComputedTextLength() : LABEL - 12);
              el("text", { "class": "txe-value", x: toKeys ? right + offset : left - offset,
                y: TOP + index * ROW + ROW / 2 + 4, "text-anchor": toKeys ? "start" : "end",
                text: w.toFixed(2) }, lines, true);
            }
          }
        }
      });
    }

    function drawCell(canvas, k, layer, head) {
      var nq = k.queries.length, nk = k.keys.length;
      var scale = Math.max(2, Math.floor(72 / Math.max(nq, nk)));
      canvas.width = nk * scale; canvas.height = nq * scale;
      var ctx = canvas.getContext("2d");
      ctx.fillStyle = "#ffffff"; ctx.fillRect(0, 0, canvas.width, canvas.height);
      ctx.fillStyle = color(head);
      for (var q = 0; q < nq; q++) {
        for (var j = 0; j < nk; j++) {
          ctx.globalAlpha = Math.sqrt(k.at(layer, head, q, j));  // faint weights stay visible
          ctx.fillRect(j * scale, q * scale, scale, scale);
        }
      }
      ctx.globalAlpha = 1;
    }

    function drawModel() {
      var k = kind();
      modelView.innerHTML = "";
      var grid = el("div", { "class": "txe-grid",
        style: "grid-template-columns: auto repeat(" + k.heads + ", auto)" }, modelView);
      el("div", { "class": "txe-grid-label" }, grid);
      for (var h = 0; h < k.heads; h++) el("div", { "class": "txe-grid-label", text: "head " + (h + 1) }, grid);
      for (var l = 0; l < k.layers; l++) {
        el("div", { "class": "txe-grid-label", text: "layer " + (l + 1) }, grid);
        for (h = 0; h < k.heads; h++) {
          var cell = el("div", { "class": "txe-cell", "data-layer": l, "data-head": h,
            title: k.title + ", layer " + (l + 1) + ", head " + (h + 1) + ": open in the head view" }, grid);
          drawCell(el("canvas", {}, cell), k, l, h);
          cell.addEventListener("click", openCell.bind(null, l, h));
        }
      }
      markCell();
    }

    function openCell(layer, head) {
      state.layer = layer; layerSelect.value = String(layer);
      state.heads = state.heads.map(function (_, h) { return h === head; });
      state.cell = [layer, head]; state.focus = null; state.pinned = false;
      drawToggles(); drawHead(); markCell();
    }

    function markCell() {
      modelView.querySelectorAll(".txe-cell").forEach(function (cell) {
        var on = state.cell && Number(cell.getAttribute("data-layer")) === state.cell[0] &&
          Number(cell.getAttribute("data-head")) === state.cell[1];
        cell.classList.toggle("txe-selected", Boolean(on));
      });
    }

    kindSelect.addEventListener("change", function () { setKind(Number(kindSelect.value)); });
    layerSelect.addEventListener("change", function () {
      state.layer = Number(layerSelect.value); state.cell = null; state.focus = null;
      state.pinned = false; drawHead(); markCell();
    });
    setKind(0);
  }

  var script = document.currentScript;
  if (script && script.parentNode && script.parentNode.classList &&
      script.parentNode.classList.contains("txe")) init(script.parentNode);
  function initAll() { document.querySelectorAll(".txe").forEach(init); }
  initAll();
  setTimeout(initAll, 0);  // an output inserted into the page after its script ran
})();

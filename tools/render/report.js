// attnkit report: draws one run's attention from the JSON block #attnkit-data. Plain
// JavaScript, no libraries, nothing loaded from the network; maps are drawn on <canvas>.
(function () {
  'use strict';
  var started = Date.now();
  var status = document.getElementById('attnkit-status');
  function fail(message) {
    status.dataset.status = 'error';
    status.dataset.error = String(message);
    status.textContent = 'The report could not be drawn: ' + message;
  }
  window.addEventListener('error', function (e) { fail(e.message || 'script error'); });
  var consoleError = console.error;
  console.error = function () {
    fail(Array.prototype.join.call(arguments, ' '));
    consoleError.apply(console, arguments);
  };

  var D, ramp, maps, rollout, snapshots;
  var T_Q, T_K, L, H;
  var state = { layer: 0, head: 0, step: 0, heads: [] };
  var dpr = Math.min(window.devicePixelRatio || 1, 2);

  // ---- helpers ---------------------------------------------------------------------------
  function decode(b64) {  // base64 of little-endian float32
    var bin = atob(b64), n = bin.length >> 2, bytes = new Uint8Array(n * 4);
    for (var i = 0; i < n * 4; i++) bytes[i] = bin.charCodeAt(i);
    if (new Uint8Array(new Uint16Array([1]).buffer)[0] === 1) return new Float32Array(bytes.buffer);
    var view = new DataView(bytes.buffer), out = new Float32Array(n);
    for (i = 0; i < n; i++) out[i] = view.getFloat32(4 * i, true);
    return out;
  }
  function clamp(x, lo, hi) { return Math.max(lo, Math.min(hi, x)); }
  function rgb(w) {  // the same piecewise-linear scale as the PNGs (73 samples of it)
    if (!(w === w)) return [173, 181, 189];
    var x = clamp(w, 0, 1) * (ramp.length - 1), i = Math.min(ramp.length - 2, Math.floor(x)), f = x - i;
    var a = ramp[i], b = ramp[i + 1];
    return [Math.round(a[0] + f * (b[0] - a[0])), Math.round(a[1] + f * (b[1] - a[1])), Math.round(a[2] + f * (b[2] - a[2]))];
  }
  function css(c) { return 'rgb(' + c[0] + ',' + c[1] + ',' + c[2] + ')'; }
  function lum(c) { return (0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]) / 255; }
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) {
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'cls') e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { e.appendChild(c); });
    return e;
  }
  function canvas(w, h, cls) {  // a canvas w × h CSS pixels, sharp on high-DPI screens
    var c = el('canvas', { cls: cls || '' });
    c.width = Math.ceil(w * dpr); c.height = Math.ceil(h * dpr);
    c.style.width = w + 'px'; c.style.height = h + 'px';
    var ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { el: c, ctx: ctx };
  }
  function map(layer, head) { var n = T_Q * T_K, o = (layer * H + head) * n; return maps.subarray(o, o + n); }
  function snapshot(step, layer, head) {
    var n = T_Q * T_K, o = ((step * L + layer) * H + head) * n; return snapshots.subarray(o, o + n);
  }
  function headName(layer, head) { return L > 1 ? 'layer ' + layer + ' · head ' + head : 'head ' + head; }
  function fmt(w, d) { return (Math.abs(w) < 0.5 * Math.pow(10, -d) ? 0 : w).toFixed(d); }
  function labelStep(needed) {
    for (var s = 1; ; s *= 100) {
      var c = [1, 2, 4, 5, 10, 20, 25, 50];
      for (var i = 0; i < c.length; i++) if (c[i] * s >= needed) return c[i] * s;
    }
  }
  var tip = document.getElementById('tip');
  function showTip(text, e) {
    tip.textContent = text; tip.hidden = false;
    var x = e.clientX + 14, y = e.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth - 4) x = e.clientX - tip.offsetWidth - 10;
    if (y + tip.offsetHeight > window.innerHeight - 4) y = e.clientY - tip.offsetHeight - 10;
    tip.style.left = x + 'px'; tip.style.top = y + 'px';
  }
  function hideTip() { tip.hidden = true; }
  function colorbar() {
    var stops = [];
    for (var k = 0; k <= 8; k++) stops.push(css(rgb(k / 8)) + ' ' + (k * 12.5) + '%');
    var r = el('span', { cls: 'ramp' });
    r.style.background = 'linear-gradient(to right, ' + stops.join(', ') + ')';
    return el('div', { cls: 'colorbar' }, [el('span', { text: '0' }), r, el('span', { text: '1' })]);
  }

  // ---- heatmap: rows = queries, columns = keys; values on hover (and in big cells) -------
  function heatmap(container, w, rows, cols, rowLabels, colLabels, maxSide) {
    var cell = clamp(Math.floor((maxSide || 560) / Math.max(rows, cols)), 3, 44);
    var font = clamp(cell * 0.7, 8, 13), step = labelStep(font * 1.2 / cell);
    var probe = canvas(1, 1).ctx;
    probe.font = font + 'px sans-serif';
    var rw = 0, cw = 0, i, j;
    rowLabels.forEach(function (s) { rw = Math.max(rw, probe.measureText(s).width); });
    colLabels.forEach(function (s) { cw = Math.max(cw, probe.measureText(s).width); });
    var vertical = cw > cell * step - 4;
    var left = Math.ceil(rw) + 10, top = 4, mw = cols * cell, mh = rows * cell;
    var bottom = (vertical ? Math.ceil(cw) : font * 1.3) + 10;
    var cv = canvas(left + mw + 8, top + mh + bottom, 'heatmap'), ctx = cv.ctx;
    var gap = cell >= 14 ? 1 : 0, decimals = cell >= 34 ? 2 : cell >= 24 ? 1 : 0;
    ctx.fillStyle = '#dee2e6'; ctx.fillRect(left, top, mw, mh);
    ctx.textAlign = 'center'; ctx.textBaseline = 'middle';
    ctx.font = Math.min(13, cell * (decimals === 2 ? 0.3 : 0.36)) + 'px sans-serif';
    for (i = 0; i < rows; i++) for (j = 0; j < cols; j++) {
      var v = w[i * cols + j], c = rgb(v);
      ctx.fillStyle = css(c);
      ctx.fillRect(left + j * cell + gap / 2, top + i * cell + gap / 2, cell - gap, cell - gap);
      if (decimals) {
        var t = fmt(v, decimals);
        ctx.fillStyle = /^[0.]*$/.test(t) ? '#adb5bd' : lum(c) < 0.45 ? '#fff' : '#212529';
        ctx.fillText(t, left + (j + 0.5) * cell, top + (i + 0.5) * cell);
      }
    }
    ctx.fillStyle = '#212529'; ctx.font = font + 'px sans-serif';
    ctx.textAlign = 'right';
    for (i = 0; i < rows; i += step) ctx.fillText(rowLabels[i], left - 6, top + (i + 0.5) * cell);
    for (j = 0; j < cols; j += step) {
      var x = left + (j + 0.5) * cell;
      if (vertical) {
        ctx.save(); ctx.translate(x, top + mh + 6); ctx.rotate(-Math.PI / 2);
        ctx.textAlign = 'right'; ctx.fillText(colLabels[j], 0, 0); ctx.restore();
      } else {
        ctx.textAlign = 'center'; ctx.textBaseline = 'top'; ctx.fillText(colLabels[j], x, top + mh + 6);
        ctx.textBaseline = 'middle';
      }
    }
    cv.el.dataset.left = String(left); cv.el.dataset.top = String(top); cv.el.dataset.cell = String(cell);
    cv.el.addEventListener('mousemove', function (e) {
      var r = cv.el.getBoundingClientRect();
      var jj = Math.floor((e.clientX - r.left - left) / cell), ii = Math.floor((e.clientY - r.top - top) / cell);
      if (ii < 0 || jj < 0 || ii >= rows || jj >= cols) return hideTip();
      showTip('query ' + rowLabels[ii] + ' → key ' + colLabels[jj] + ': ' + w[ii * cols + jj].toFixed(4), e);
    });
    cv.el.addEventListener('mouseleave', hideTip);
    container.appendChild(cv.el);
    return cv.el;
  }

  // A map as pixels (one per cell), scaled up by CSS: cheap for 64 thumbnails of 128 × 128.
  function thumbnail(w, rows, cols, side, cls) {
    var c = el('canvas', { cls: cls });
    c.width = cols; c.height = rows;
    c.style.width = side + 'px'; c.style.height = Math.max(8, Math.round(side * rows / cols)) + 'px';
    var ctx = c.getContext('2d'), img = ctx.createImageData(cols, rows);
    for (var k = 0; k < rows * cols; k++) {
      var col = rgb(w[k]);
      img.data[4 * k] = col[0]; img.data[4 * k + 1] = col[1]; img.data[4 * k + 2] = col[2]; img.data[4 * k + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    return c;
  }

  // ---- loss curve ----------------------------------------------------------------------------
  function niceStep(range, count) {
    var raw = range / count, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = [1, 2, 5, 10];
    for (var i = 0; i < m.length; i++) if (m[i] * p >= raw) return m[i] * p;
    return 10 * p;
  }
  function drawLoss() {
    var losses = D.losses;
    if (!losses.length) return;
    var section = document.getElementById('loss-section');
    section.hidden = false;
    var box = document.getElementById('loss');
    var W = clamp(box.clientWidth || 800, 320, 1000), Hh = 300, left = 56, right = 16, top = 12, bottom = 40;
    var cv = canvas(W, Hh), ctx = cv.ctx, n = losses.length, pw = W - left - right, ph = Hh - top - bottom;
    var hi = 0;
    losses.forEach(function (l) { if (isFinite(l)) hi = Math.max(hi, l); });
    if (!(hi > 0)) hi = 1;
    var ys = niceStep(hi, 5), ymax = Math.ceil(hi / ys - 1e-9) * ys, xs = niceStep(n, 6);
    function X(s) { return left + s / n * pw; }
    function Y(v) { return top + ph - v / ymax * ph; }
    ctx.font = '11px sans-serif'; ctx.fillStyle = '#6c757d'; ctx.strokeStyle = '#dee2e6'; ctx.lineWidth = 1;
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    var d = Math.max(0, -Math.floor(Math.log10(ys) + 1e-9));
    for (var v = 0; v <= ymax + ys * 1e-9; v += ys) {
      ctx.beginPath(); ctx.moveTo(left, Y(v) + 0.5); ctx.lineTo(left + pw, Y(v) + 0.5); ctx.stroke();
      ctx.fillText(v.toFixed(d), left - 6, Y(v));
    }
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    for (var s = 0; s <= n + xs * 1e-9; s += xs) ctx.fillText(String(Math.round(s)), X(s), top + ph + 6);
    ctx.fillText('step', left + pw / 2, top + ph + 22);
    ctx.save(); ctx.translate(14, top + ph / 2); ctx.rotate(-Math.PI / 2); ctx.fillText('loss', 0, -6); ctx.restore();
    ctx.strokeStyle = '#6c757d';
    ctx.beginPath(); ctx.moveTo(left + 0.5, top); ctx.lineTo(left + 0.5, top + ph + 0.5); ctx.lineTo(left + pw, top + ph + 0.5); ctx.stroke();
    (D.snapshotSteps || []).forEach(function (st) {
      if (st < 0 || st > n) return;
      ctx.strokeStyle = 'rgba(214,39,40,0.35)';
      ctx.beginPath(); ctx.moveTo(X(st) + 0.5, top); ctx.lineTo(X(st) + 0.5, top + ph); ctx.stroke();
    });
    var window_ = n >= 60 ? Math.max(5, Math.floor(n / 40)) | 1 : 0, half = window_ >> 1;
    function line(values, offset, color, width) {
      ctx.strokeStyle = color; ctx.lineWidth = width; ctx.lineJoin = 'round'; ctx.beginPath();
      var pen = false;
      for (var k = 0; k < values.length; k++) {
        if (!isFinite(values[k])) { pen = false; continue; }
        if (pen) ctx.lineTo(X(k + 1 + offset), Y(values[k])); else ctx.moveTo(X(k + 1 + offset), Y(values[k]));
        pen = true;
      }
      ctx.stroke();
    }
    line(losses, 0, window_ ? '#9ecae1' : '#08519c', window_ ? 1 : 2);
    var smooth = [];  // centred mean of window_ steps, smooth[k] for step k + 1 + half
    if (window_) {
      var sum = [0], cnt = [0];
      for (var k = 0; k < n; k++) {
        var ok = isFinite(losses[k]);
        sum.push(sum[k] + (ok ? losses[k] : 0)); cnt.push(cnt[k] + (ok ? 1 : 0));
      }
      for (k = half; k + half < n; k++) {
        var c = cnt[k + half + 1] - cnt[k - half];
        smooth.push(c ? (sum[k + half + 1] - sum[k - half]) / c : NaN);
      }
      line(smooth, half, '#08519c', 2.2);
    }
    cv.el.addEventListener('mousemove', function (e) {
      var r = cv.el.getBoundingClientRect(), st = Math.round((e.clientX - r.left - left) / pw * n);
      if (st < 1 || st > n) return hideTip();
      var text = 'step ' + st + ': loss ' + losses[st - 1].toFixed(4);
      if (window_ && st - 1 - half >= 0 && st - 1 - half < smooth.length)
        text += ', mean of ' + window_ + ' steps around it ' + smooth[st - 1 - half].toFixed(4);
      showTip(text, e);
    });
    cv.el.addEventListener('mouseleave', hideTip);
    box.appendChild(cv.el);
  }

  // ---- head view: link diagram -----------------------------------------------------------------
  function drawHeadView() {
    var controls = document.getElementById('head-controls'), box = document.getElementById('links');
    state.heads = [];
    for (var h = 0; h < H; h++) state.heads.push(true);
    var layer = 0;
    if (L > 1) {
      var sel = el('select', { id: 'head-view-layer', 'aria-label': 'layer' });
      for (var l = 0; l < L; l++) sel.appendChild(el('option', { value: String(l), text: 'layer ' + l }));
      sel.addEventListener('change', function () { layer = +sel.value; draw(-1, -1); });
      controls.appendChild(el('label', { text: 'Layer ' }, [sel]));
    }
    var buttons = [];
    for (h = 0; h < H; h++) (function (h) {
      var b = el('button', { cls: 'head-toggle', 'data-head': String(h), type: 'button', text: 'head ' + h, 'aria-pressed': 'true' });
      b.style.setProperty('--c', D.headColors[h]);
      b.addEventListener('click', function () {
        state.heads[h] = !state.heads[h];
        b.classList.toggle('off', !state.heads[h]);
        b.setAttribute('aria-pressed', String(state.heads[h]));
        draw(-1, -1);
      });
      buttons.push(b); controls.appendChild(b);
    })(h);
    if (H > 1) {
      var all = el('button', { cls: 'plain', type: 'button', text: 'all' }), none = el('button', { cls: 'plain', type: 'button', text: 'none' });
      function setAll(on) {
        for (var k = 0; k < H; k++) { state.heads[k] = on; buttons[k].classList.toggle('off', !on); buttons[k].setAttribute('aria-pressed', String(on)); }
        draw(-1, -1);
      }
      all.addEventListener('click', function () { setAll(true); });
      none.addEventListener('click', function () { setAll(false); });
      controls.appendChild(all); controls.appendChild(none);
    }
    var n = Math.max(T_Q, T_K), rowH = clamp(Math.floor(620 / n), 12, 26), font = Math.min(14, rowH * 0.62);
    var probe = canvas(1, 1).ctx;
    probe.font = font + 'px sans-serif';
    var lw = 50, rw = 50;
    D.queryLabels.forEach(function (s) { lw = Math.max(lw, probe.measureText(s).width); });
    D.keyLabels.forEach(function (s) { rw = Math.max(rw, probe.measureText(s).width); });
    var span = n > 32 ? 280 : 220, top = 24;
    var minWeight = n > 32 ? 0.05 : 0.01;  // as in links.png: faint lines of long sequences only grey the picture
    var xl = Math.ceil(lw) + 14, xr = xl + span, W = xr + Math.ceil(rw) + 16, Hh = top + n * rowH + 8;
    var cv = canvas(W, Hh, 'links'), ctx = cv.ctx;
    var q0 = top + (n - T_Q) * rowH / 2, k0 = top + (n - T_K) * rowH / 2;
    function qy(i) { return q0 + (i + 0.5) * rowH; }
    function ky(j) { return k0 + (j + 0.5) * rowH; }
    function draw(fq, fk) {  // fq / fk: the hovered query / key, -1 for none
      cv.el.dataset.focus = fq + ',' + fk;
      ctx.clearRect(0, 0, W, Hh);
      ctx.font = '12px sans-serif'; ctx.fillStyle = '#6c757d'; ctx.textBaseline = 'middle';
      ctx.textAlign = 'right'; ctx.fillText('queries', xl - 8, 10);
      ctx.textAlign = 'left'; ctx.fillText('keys', xr + 8, 10);
      var buckets = 16;
      for (var h = 0; h < H; h++) {
        if (!state.heads[h]) continue;
        var w = map(layer, h), paths = [];
        for (var b = 0; b < buckets; b++) paths.push([]);
        for (var i = 0; i < T_Q; i++) {
          if (fq >= 0 && i !== fq) continue;
          for (var j = 0; j < T_K; j++) {
            if (fk >= 0 && j !== fk) continue;
            var v = w[i * T_K + j];
            if (!(v >= minWeight)) continue;
            paths[Math.min(buckets - 1, Math.floor(Math.min(1, v) * buckets))].push(i, j);
          }
        }
        ctx.strokeStyle = D.headColors[h]; ctx.lineCap = 'round';
        for (b = 0; b < buckets; b++) {  // one path per opacity step: fast for T = 128, 8 heads
          var p = paths[b];
          if (!p.length) continue;
          var wgt = (b + 0.5) / buckets;
          ctx.globalAlpha = Math.max(0.04, wgt); ctx.lineWidth = 0.75 + 3 * wgt;
          ctx.beginPath();
          for (var k = 0; k < p.length; k += 2) { ctx.moveTo(xl, qy(p[k])); ctx.lineTo(xr, ky(p[k + 1])); }
          ctx.stroke();
        }
        ctx.globalAlpha = 1;
      }
      ctx.font = font + 'px sans-serif';
      for (var i2 = 0; i2 < T_Q; i2++) {
        ctx.fillStyle = i2 === fq ? '#08519c' : '#212529';
        ctx.font = (i2 === fq ? 'bold ' : '') + font + 'px sans-serif';
        ctx.textAlign = 'right'; ctx.fillText(D.queryLabels[i2], xl - 8, qy(i2));
      }
      for (var j2 = 0; j2 < T_K; j2++) {
        ctx.fillStyle = j2 === fk ? '#08519c' : '#212529';
        ctx.font = (j2 === fk ? 'bold ' : '') + font + 'px sans-serif';
        ctx.textAlign = 'left'; ctx.fillText(D.keyLabels[j2], xr + 8, ky(j2));
      }
      ctx.fillStyle = '#adb5bd';
      for (i2 = 0; i2 < T_Q; i2++) { ctx.beginPath(); ctx.arc(xl, qy(i2), 2.2, 0, 2 * Math.PI); ctx.fill(); }
      for (j2 = 0; j2 < T_K; j2++) { ctx.beginPath(); ctx.arc(xr, ky(j2), 2.2, 0, 2 * Math.PI); ctx.fill(); }
    }
    var hovered = '';
    cv.el.addEventListener('mousemove', function (e) {
      var r = cv.el.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
      var fq = -1, fk = -1;
      if (x < (xl + xr) / 2) { fq = Math.floor((y - q0) / rowH); if (fq < 0 || fq >= T_Q) fq = -1; }
      else { fk = Math.floor((y - k0) / rowH); if (fk < 0 || fk >= T_K) fk = -1; }
      if (hovered === fq + ',' + fk) return;
      hovered = fq + ',' + fk;
      draw(fq, fk);
    });
    cv.el.addEventListener('mouseleave', function () { hovered = ''; draw(-1, -1); });
    cv.el.dataset.firstQueryY = String(qy(0));
    draw(-1, -1);
    box.appendChild(cv.el);
  }

  // ---- model view, detail heatmap, rollout, snapshots ------------------------------------------------
  var thumbs = [];
  function select(layer, head, scroll) {
    state.layer = layer; state.head = head;
    thumbs.forEach(function (t) { t.classList.toggle('selected', +t.dataset.layer === layer && +t.dataset.head === head); });
    drawDetail();
    drawSnapshots();
    if (scroll) document.getElementById('detail-section').scrollIntoView({ behavior: 'smooth', block: 'start' });
  }
  function drawModelView() {
    var box = document.getElementById('thumbs');
    var side = clamp(Math.floor(780 / H) - 10, 36, 110);
    var grid = el('div', { cls: 'grid' });
    grid.style.gridTemplateColumns = 'auto repeat(' + H + ', ' + (side + 4) + 'px)';
    grid.appendChild(el('div'));
    for (var h = 0; h < H; h++) grid.appendChild(el('div', { cls: 'colhead', text: 'head ' + h }));
    for (var l = 0; l < L; l++) {
      grid.appendChild(el('div', { cls: 'rowhead', text: 'layer ' + l }));
      for (h = 0; h < H; h++) (function (l, h) {
        var t = thumbnail(map(l, h), T_Q, T_K, side, 'thumb');
        t.dataset.layer = String(l); t.dataset.head = String(h);
        t.title = headName(l, h) + ' (click to enlarge)';
        t.addEventListener('click', function () { select(l, h, true); });
        thumbs.push(t); grid.appendChild(t);
      })(l, h);
    }
    box.appendChild(grid);
  }
  function drawDetail() {
    var box = document.getElementById('detail');
    box.textContent = '';
    document.getElementById('detail-title').textContent = 'Heatmap: ' + headName(state.layer, state.head);
    heatmap(box, map(state.layer, state.head), T_Q, T_K, D.queryLabels, D.keyLabels, 620);
    box.appendChild(colorbar());
  }
  function drawRollout() {
    if (!rollout) return;
    document.getElementById('rollout-section').hidden = false;
    var box = document.getElementById('rollout');
    heatmap(box, rollout, T_Q, T_Q, D.queryLabels, D.queryLabels, 560);
    box.appendChild(colorbar());
  }
  var snapshotUi = null;
  function drawSnapshots() {
    if (!snapshots) return;
    var steps = D.snapshotSteps, S = steps.length;
    document.getElementById('snapshots-section').hidden = false;
    if (!snapshotUi) {
      var controls = document.getElementById('snapshot-controls');
      var slider = el('input', { type: 'range', min: '0', max: String(S - 1), value: '0', step: '1', id: 'snapshot-slider', 'aria-label': 'snapshot' });
      var label = el('span', { id: 'snapshot-label' });
      var play = el('button', { cls: 'plain', type: 'button', text: '▶ play' });
      var timer = null;
      slider.addEventListener('input', function () { state.step = +slider.value; drawSnapshots(); });
      play.addEventListener('click', function () {
        if (timer) { clearInterval(timer); timer = null; play.textContent = '▶ play'; return; }
        play.textContent = '❚❚ pause';
        timer = setInterval(function () {
          state.step = (state.step + 1) % S; slider.value = String(state.step); drawSnapshots();
        }, 700);
      });
      controls.appendChild(el('span', { text: 'step' }));
      controls.appendChild(slider); controls.appendChild(label); controls.appendChild(play);
      snapshotUi = { slider: slider, label: label };
    }
    snapshotUi.label.textContent = 'step ' + steps[state.step] + ' (' + (state.step + 1) + ' of ' + S + '), ' + headName(state.layer, state.head);
    var strip = document.getElementById('snapshot-strip');
    strip.textContent = '';
    var row = el('div', { cls: 'strip' }), side = clamp(Math.floor(760 / S) - 12, 40, 96);
    steps.forEach(function (st, k) {
      var t = thumbnail(snapshot(k, state.layer, state.head), T_Q, T_K, side, 'snap-thumb' + (k === state.step ? ' selected' : ''));
      t.title = 'step ' + st;
      t.addEventListener('click', function () { state.step = k; snapshotUi.slider.value = String(k); drawSnapshots(); });
      row.appendChild(el('div', { cls: 'snap' }, [t, el('span', { text: 'step ' + st })]));
    });
    strip.appendChild(row);
    var box = document.getElementById('snapshot');
    box.textContent = '';
    heatmap(box, snapshot(state.step, state.layer, state.head), T_Q, T_K, D.queryLabels, D.keyLabels, 480);
  }

  // report.html#selftest: drive the page as a user would (click, toggle, hover, slide) and
  // record what happened in #attnkit-status's data-selftest, for the browser test.
  function selfTest() {
    var out = [];
    function check(name, ok) { out.push(name + ':' + (ok ? 'ok' : 'fail')); }
    function mouse(target, type, x, y) {
      var r = target.getBoundingClientRect();
      target.dispatchEvent(new MouseEvent(type, { bubbles: true, clientX: r.left + x, clientY: r.top + y }));
    }
    var last = thumbs[thumbs.length - 1];
    last.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    check('click', document.getElementById('detail-title').textContent.indexOf(headName(L - 1, H - 1)) >= 0 &&
      last.classList.contains('selected'));
    var toggle = document.querySelector('.head-toggle');
    toggle.click();
    check('toggle', toggle.classList.contains('off') && !state.heads[0]);
    toggle.click();
    var links = document.querySelector('canvas.links');
    mouse(links, 'mousemove', 4, +links.dataset.firstQueryY);
    check('hover', links.dataset.focus === '0,-1');
    mouse(links, 'mouseleave', 0, 0);
    check('unhover', links.dataset.focus === '-1,-1');
    var map = document.querySelector('#detail canvas.heatmap');
    mouse(map, 'mousemove', +map.dataset.left + +map.dataset.cell / 2, +map.dataset.top + +map.dataset.cell / 2);
    check('tip', !tip.hidden && tip.textContent.indexOf('query ' + D.queryLabels[0] + ' → key ' + D.keyLabels[0]) === 0);
    hideTip();
    if (snapshots) {
      var slider = document.getElementById('snapshot-slider');
      slider.value = String(D.snapshotSteps.length - 1);
      slider.dispatchEvent(new Event('input'));
      check('slider', document.getElementById('snapshot-label').textContent.indexOf('step ' + D.snapshotSteps[D.snapshotSteps.length - 1] + ' ') === 0);
    }
    status.dataset.selftest = out.join(' ');
  }

  function main() {
    D = JSON.parse(document.getElementById('attnkit-data').textContent);
    ramp = D.colormap; L = D.layers; H = D.heads; T_Q = D.rows; T_K = D.cols;
    maps = decode(D.attention);
    if (maps.length !== L * H * T_Q * T_K) throw new Error('attention data has ' + maps.length + ' values, expected ' + L * H * T_Q * T_K);
    rollout = D.rollout ? decode(D.rollout) : null;
    snapshots = D.snapshots ? decode(D.snapshots) : null;
    drawLoss();
    drawHeadView();
    drawModelView();
    drawRollout();
    select(0, 0, false);
    status.dataset.layers = String(L);
    status.dataset.heads = String(H);
    status.dataset.ms = String(Date.now() - started);
    if (location.hash === '#selftest') selfTest();
  }

  try {
    main();
    if (status.dataset.status !== 'error') { status.dataset.status = 'ready'; status.textContent = ''; }
  } catch (e) {
    fail(e && e.message ? e.message : String(e));
  }
})();

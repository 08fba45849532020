// A bar chart of record counts over time, drawn as SVG by hand (no
// library): one bar per bucket of GET /log/stats, each a button that
// reports its interval.

const NS = 'http://www.w3.org/2000/svg';
const svg = (tag, attrs, ...children) => {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
};

// Steps the chart chooses from, in seconds: the smallest that makes at
// most MAX_BARS bars.
const STEPS = [60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400, 30 * 86400];
export const MAX_BARS = 60;
export function chooseStep(from, to) {
  const span = (to - from) / 1000;
  return STEPS.find(s => span / s <= MAX_BARS) ?? Math.ceil(span / MAX_BARS);
}

const fmt = (d) => d.toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });

// barChart draws stats (the answer of GET /log/stats) for type; onPick is
// called with (from, to) Dates when a bar is clicked or activated.
export function barChart(stats, type, onPick) {
  const W = 720, H = 160, top = 16, bottom = 22, left = 4;
  const buckets = stats.buckets;
  const counts = buckets.map(b => b.counts[type] ?? 0);
  const max = Math.max(1, ...counts);
  const bw = (W - left) / Math.max(1, buckets.length);
  const total = counts.reduce((a, b) => a + b, 0);
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'group', 'aria-label': `Records of type ${type} per interval: ${total} in all` });
  chart.append(svg('line', { x1: left, x2: W, y1: H - bottom + 0.5, y2: H - bottom + 0.5, class: 'axis' }));
  buckets.forEach((b, i) => {
    const n = counts[i];
    const h = n ? Math.max(2, (H - top - bottom) * n / max) : 0;
    const from = new Date(b.from), to = new Date(b.to);
    const label = `${fmt(from)} – ${fmt(to)}: ${n} ${type}`;
    const bar = svg('g', { class: 'bar', tabindex: 0, role: 'button', 'aria-label': label },
      svg('title', {}, label),
      svg('rect', { x: left + i * bw, y: top, width: bw, height: H - top - bottom, class: 'hit' }),
      svg('rect', { x: left + i * bw + 1, y: H - bottom - h, width: Math.max(1, bw - 2), height: h, class: 'fill' }));
    const pick = () => onPick(from, to);
    bar.addEventListener('click', pick);
    bar.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); pick(); } });
    chart.append(bar);
  });
  chart.append(
    svg('text', { x: left, y: 12, class: 'label' }, `max ${max}`),
    svg('text', { x: left, y: H - 6, class: 'label' }, fmt(new Date(stats.from))),
    svg('text', { x: W, y: H - 6, class: 'label', 'text-anchor': 'end' }, fmt(new Date(stats.to))));
  return chart;
}

// What the race lab's waterfall and the trace page share: the bar each
// kind of span is drawn as, and where a bar or a tick sits on a row's
// time axis.
import { el } from './api.js';

// BAR is the class of a bar by the kind of its span.
export const BAR = { 'lock.wait': 'wf-wait', 'lock.hold': 'wf-hold', 'db.tx': 'wf-tx', gateway: 'wf-gw', idempotency: 'wf-idem' };

// barKind is the kind a span's name is drawn as, '' for a plain one (the
// lab's server-side barKind, harness/lab/waterfall.go, says the same).
export function barKind(name) {
  if (name === 'lock.wait' || name === 'lock.hold' || name === 'db.tx') return name;
  if (name.startsWith('gateway ')) return 'gateway';
  if (name.startsWith('idempotency ')) return 'idempotency';
  return '';
}

// place puts a bar or a tick on the row's time axis, in percent of the
// whole; a bar is at least a sliver, so a short one still shows.
export function place(node, startMS, ms, total) {
  node.style.left = `${(100 * startMS / total).toFixed(3)}%`;
  if (ms !== undefined) node.style.width = `${Math.max(0.25, 100 * ms / total).toFixed(3)}%`;
  return node;
}

// axis is the row of milliseconds above the bars, at quarters of ms.
export function axis(ms) {
  const total = Math.max(ms, 0.001);
  return el('div', { class: 'wf-row wf-axis', 'aria-hidden': 'true' }, el('span', { class: 'wf-label', text: 'ms' }),
    el('span', { class: 'wf-track' }, ...[0, 0.25, 0.5, 0.75, 1].map((f) =>
      place(el('span', { class: 'wf-grid', text: (f * ms).toFixed(f === 0 ? 0 : 1) }), f * ms, undefined, total))),
    el('span', { class: 'wf-tags' }));
}

// The shop: catalogue with live stock, buy with an idempotency key per
// intent, pay with each test card, orders, cancel.
import { api, cents, describe, el, header, mountSession, newKey, say, session, traceLink } from './api.js';

const catalogue = document.querySelector('#catalogue tbody');
const orders = document.querySelector('#orders tbody');
const buyResult = document.getElementById('buy-result');
const orderResult = document.getElementById('order-result');
const cards = ['pm_card_ok', 'pm_card_declined', 'pm_card_slow', 'pm_card_flaky'];

// The race lab's products (LAB-…) and what make load creates (LOAD-…,
// loadtest/k6/lib/config.js) are not for sale.
const forSale = (p) => !p.sku.startsWith('LAB-') && !p.sku.startsWith('LOAD-');

async function allProducts() {
  const out = [];
  let cursor = '';
  for (let page = 0; page < 20; page++) {
    const r = await api('GET', `/v1/products?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { auth: false });
    if (!r.ok) throw new Error(describe(r));
    out.push(...r.data.items);
    if (!r.data.next_cursor) break;
    cursor = r.data.next_cursor;
  }
  return out.filter(forSale);
}

async function loadCatalogue() {
  let items;
  try { items = await allProducts(); } catch (err) { say(buyResult, `Could not read the catalogue: ${err.message}`, 'bad'); return; }
  const rows = items.map((p) => {
    const existing = catalogue.querySelector(`tr[data-sku="${CSS.escape(p.sku)}"]`);
    if (existing) {
      existing.querySelector('.stock').textContent = p.stock_available;
      return existing;
    }
    const qty = el('input', { type: 'number', min: '1', max: '100', value: '1', id: `qty-${p.sku}`, class: 'qty' });
    const buy = el('button', { type: 'button', class: 'buy', onclick: () => buyNow(p, Number(qty.value)) }, 'Buy');
    return el('tr', { 'data-sku': p.sku },
      el('td', { text: p.name }),
      el('td', { class: 'hide-narrow' }, el('code', { text: p.sku })),
      el('td', { class: 'num', text: cents(p.price_cents) }),
      el('td', { class: 'num stock', text: String(p.stock_available) }),
      el('td', {}, el('label', { for: `qty-${p.sku}`, class: 'sr-only', text: `Quantity of ${p.name}` }), qty, ' ', buy));
  });
  catalogue.replaceChildren(...rows);
}

// buyNow is one intent: one key, shown, and reusable by "Send again".
async function buyNow(p, quantity) {
  if (!session.token) { say(buyResult, 'Register first (top of the page).', 'bad'); return; }
  const key = newKey();
  const body = { items: [{ sku: p.sku, quantity }] };
  await sendOrder(p, body, key);
}

async function sendOrder(p, body, key) {
  const r = await api('POST', '/v1/orders', { body, key });
  const replayed = r.headers.get('Idempotent-Replayed') === 'true';
  buyResult.replaceChildren();
  buyResult.className = `msg ${r.ok ? 'ok' : 'bad'}`;
  buyResult.append(
    el('span', { id: 'buy-status', text: r.ok ? `Order ${r.data.id} placed (${r.status}${replayed ? ', replayed: the same order' : ''})` : `Not placed: ${describe(r)}` }),
    el('br'), 'Idempotency-Key: ', el('code', { id: 'buy-key', text: key }), ' ',
    el('button', { type: 'button', class: 'secondary', id: 'buy-again', onclick: () => sendOrder(p, body, key) }, 'Send again (same key)'));
  const link = traceLink(r);
  if (link) buyResult.append(' ', link);
  await Promise.all([loadCatalogue(), loadOrders()]);
}

async function loadOrders() {
  if (!session.token) { orders.replaceChildren(el('tr', {}, el('td', { colspan: '5', text: 'Register to see your orders.' }))); return; }
  const r = await api('GET', '/v1/orders?limit=50');
  if (!r.ok) { say(orderResult, `Could not read your orders: ${describe(r)}`, 'bad', r); return; }
  if (r.data.items.length === 0) { orders.replaceChildren(el('tr', {}, el('td', { colspan: '5', text: 'No orders yet.' }))); return; }
  orders.replaceChildren(...r.data.items.map(orderRow));
}

function orderRow(o) {
  const actions = el('td', {});
  if (o.status === 'pending_payment') {
    const sel = el('select', { id: `card-${o.id}`, class: 'card' }, ...cards.map((c) => el('option', { value: c, text: c.replace('pm_card_', '') })));
    actions.append(
      el('label', { for: `card-${o.id}`, class: 'sr-only', text: 'Test card' }), sel, ' ',
      el('button', { type: 'button', class: 'pay', onclick: () => pay(o, sel.value) }, 'Pay'), ' ');
  }
  if (o.status === 'pending_payment' || o.status === 'paying') {
    actions.append(el('button', { type: 'button', class: 'secondary cancel', onclick: () => cancel(o) }, 'Cancel'));
  }
  return el('tr', { 'data-order': o.id },
    el('td', {}, el('code', { title: o.id, text: `…${o.id.slice(-8)}` })),
    el('td', { text: o.items.map((i) => `${i.quantity}× ${i.sku}`).join(', ') }),
    el('td', { class: 'num', text: cents(o.total_cents) }),
    el('td', {}, el('span', { class: `status ${o.status}`, text: o.status })),
    actions);
}

async function pay(o, card) {
  const key = newKey();
  say(orderResult, `Paying ${`…${o.id.slice(-8)}`} with ${card}…`);
  const r = await api('POST', `/v1/orders/${o.id}/payments`, { body: { payment_method: card }, key });
  let text;
  if (r.status === 201) text = `Paid: payment ${r.data.status}, ${cents(r.data.amount_cents)}`;
  else if (r.status === 202) text = 'The gateway is slow: payment processing, the service settles it later';
  else text = `Not paid: ${describe(r)}`;
  say(orderResult, `${text} (key ${key})`, r.status === 201 ? 'ok' : r.status === 202 ? '' : 'bad', r);
  await Promise.all([loadOrders(), loadCatalogue()]);
}

async function cancel(o) {
  const r = await api('POST', `/v1/orders/${o.id}/cancel`);
  say(orderResult, r.ok ? `Order ${`…${o.id.slice(-8)}`} cancelled: its stock is back` : `Not cancelled: ${describe(r)}`, r.ok ? 'ok' : 'bad', r);
  await Promise.all([loadOrders(), loadCatalogue()]);
}

header();
mountSession(document.getElementById('session'), () => { loadOrders(); });
loadCatalogue();
loadOrders();
setInterval(loadCatalogue, 3000);

// Posts: a like button with the exact count and liked_by_me.
import { api, describe, el, header, mountSession, say, session } from './api.js';

const list = document.getElementById('posts');
const result = document.getElementById('post-result');

// Race lab posts are its own; make load's are tagged (loadtest/k6/lib/config.js).
const shown = (p) => !p.title.startsWith('Race lab ') && !p.title.startsWith('Load test: ');

async function load() {
  if (!session.token) { list.replaceChildren(el('li', { text: 'Register to read and like posts.' })); return; }
  const r = await api('GET', '/v1/posts?limit=50');
  if (!r.ok) { say(result, `Could not read the posts: ${describe(r)}`, 'bad', r); return; }
  const posts = r.data.items.filter(shown);
  if (posts.length === 0) { list.replaceChildren(el('li', { text: 'No posts yet: write the first.' })); return; }
  list.replaceChildren(...posts.map(item));
}

function item(p) {
  const count = el('span', { class: 'count', 'aria-live': 'polite', text: String(p.like_count) });
  const button = el('button', { type: 'button', class: 'like', 'aria-pressed': String(p.liked_by_me) });
  const paint = (liked) => {
    button.setAttribute('aria-pressed', String(liked));
    button.textContent = liked ? '♥ Liked' : '♡ Like';
    button.setAttribute('aria-label', `${liked ? 'Unlike' : 'Like'} “${p.title}”`);
  };
  paint(p.liked_by_me);
  button.addEventListener('click', async () => {
    const liked = button.getAttribute('aria-pressed') === 'true';
    button.disabled = true;
    const r = await api(liked ? 'DELETE' : 'PUT', `/v1/posts/${p.id}/like`);
    button.disabled = false;
    if (!r.ok) { say(result, `Like not changed: ${describe(r)}`, 'bad', r); return; }
    paint(r.data.liked);
    count.textContent = String(r.data.like_count);
  });
  return el('li', { 'data-post': p.id },
    el('span', { class: 'title', text: p.title }),
    el('span', {}, count, ' likes ', button));
}

document.getElementById('new-post').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  if (!session.token) { say(result, 'Register first.', 'bad'); return; }
  const input = document.getElementById('post-title');
  const r = await api('POST', '/v1/posts', { body: { title: input.value } });
  if (!r.ok) { say(result, `Not posted: ${describe(r)}`, 'bad', r); return; }
  input.value = '';
  say(result, 'Posted.', 'ok');
  await load();
});

header();
mountSession(document.getElementById('session'), load);
load();

// The dashboard's shell: login (when the server has an auth token), the page router (the part
// of the URL after `#`), the navigation, the skip link, and one live event stream shared by
// every page. Each page module exports `render(main, context)` and returns `{ onEvent(name,
// data), resync(), dispose() }`: `resync` re-reads the page's data whenever the stream
// (re)connects or reports missed events (`lagged`), since events are not replayed. A `changed`
// event (on a shared store: a task changed through another instance, or through the store) is
// a status change like any other to the pages.

import { api, follow, token, AuthError } from './api.js';
import { h, put, notice, throttle } from './dom.js';
import * as tasks from './tasks.js';
import * as detail from './detail.js';
import * as waiting from './waiting.js';
import * as schedules from './schedules.js';
import * as tools from './tools.js';
import * as health from './health.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const live = document.getElementById('live');
const logout = document.getElementById('logout');
const waitingCount = document.getElementById('waiting-count');
const skip = document.querySelector('.skip');

let page = null;
let stream = null;

const PAGES = [
  [/^#?\/?(tasks)?$/, (m) => tasks.render(main, m), 'tasks', 'Tasks'],
  [/^#\/task\/([0-9a-fA-F-]+)$/, (m) => detail.render(main, m[1]), 'tasks', 'Task'],
  [/^#\/waiting$/, () => waiting.render(main), 'waiting', 'Waiting for people'],
  [/^#\/schedules$/, () => schedules.render(main), 'schedules', 'Schedules'],
  [/^#\/tools$/, () => tools.render(main), 'tools', 'Tools and roles'],
  [/^#\/health$/, () => health.render(main), 'health', 'Health'],
];

function route() {
  if (page) page.dispose?.();
  page = null;
  const hash = location.hash || '#/tasks';
  for (const [pattern, show, name, title] of PAGES) {
    const match = hash.match(pattern);
    if (!match) continue;
    for (const link of nav.querySelectorAll('a')) {
      if (link.dataset.page === name) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    document.title = `${title} · mai-agent`;
    page = show(match);
    main.focus({ preventScroll: true });
    return;
  }
  put(main, h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/tasks' }, 'Back to the tasks')));
}

async function countWaiting() {
  try {
    const list = await api('/v1/tasks?status=waiting_input&limit=1');
    const n = list.total;
    waitingCount.hidden = n === 0;
    waitingCount.textContent = String(n);
  } catch {
    // the page itself reports failures
  }
}

const refreshWaitingCount = throttle(countWaiting, 500);

/** Events missed (a reconnect, a `lagged` report): the waiting count and the page read their
 *  data again instead of trusting what they had. */
function resync() {
  refreshWaitingCount();
  page?.resync?.();
}

function startEvents() {
  stream?.abort();
  stream = new AbortController();
  let was = null;
  const setState = (state) => {
    // What happened while there was no stream, or what it dropped, is not replayed. (The first
    // connection needs no resync: the page reads its data as it opens.)
    if (state === 'lagged') {
      resync();
      return;
    }
    live.textContent = state === 'live' ? '● live' : '○ reconnecting…';
    live.dataset.state = state;
    if (state === 'live' && was === 'reconnecting') resync();
    was = state;
  };
  follow((name, data) => {
    if (name === 'lagged') return; // onState('lagged') resyncs
    if (name === 'status' || name === 'created' || name === 'changed') refreshWaitingCount();
    page?.onEvent?.(name, data);
  }, setState, stream.signal).catch((error) => {
    if (error instanceof AuthError) showLogin('The token was refused; type it again.');
  });
}

function showLogin(message) {
  stream?.abort();
  page?.dispose?.();
  page = null;
  nav.hidden = true;
  logout.hidden = true;
  live.textContent = '';
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true });
  const status = h('div');
  const form = h('form', { class: 'card login', onsubmit: async (event) => {
    event.preventDefault();
    put(status);
    // The typed token is tried first and kept only once the server took it.
    const typed = input.value.trim();
    try {
      if (!(await signedIn(typed))) {
        put(status, notice('That token was refused ([server] auth_token).', 'error'));
        return;
      }
    } catch (error) {
      put(status, notice(`Cannot reach the API: ${error.message || error}`, 'error'));
      return;
    }
    token.set(typed);
    start();
  } },
  h('h1', {}, 'Log in'),
  h('p', {}, 'This mai-agent has an auth token ([server] auth_token). Type it to continue; it is kept for this browser tab only.'),
  h('label', { for: 'token' }, 'Token'), input,
  h('button', { type: 'submit', id: 'login' }, 'Log in'),
  status);
  if (message) status.append(notice(message, 'error'));
  put(main, form);
  input.focus();
}

/** Whether the server takes `bearer` (default: the kept token); throws when it cannot be
 *  reached or fails. */
async function signedIn(bearer) {
  try {
    await api('/v1/tasks?limit=1', { bearer });
    return true;
  } catch (error) {
    if (error instanceof AuthError) return false;
    throw error;
  }
}

function start() {
  nav.hidden = false;
  logout.hidden = token.get() === '';
  startEvents();
  refreshWaitingCount();
  route();
}

// The skip link moves the keyboard focus to the page's content (its href alone would change the
// route, and focus would stay at the top).
skip.addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});
window.addEventListener('mai-auth-refused', () => showLogin('The token was refused; type it again.'));
logout.addEventListener('click', () => {
  token.clear();
  showLogin();
});
window.addEventListener('hashchange', () => {
  if (!nav.hidden) route();
});

/** The first visit: logged in already, or the login; while the API cannot be reached, says so
 *  and tries again, waiting longer each time (up to 15 s). */
async function begin(pause = 1000) {
  try {
    if (await signedIn()) start();
    else showLogin();
  } catch (error) {
    put(main, notice(`Cannot reach the API: ${error.message || error}; trying again…`, 'error'));
    setTimeout(() => begin(Math.min(pause * 2, 15000)), pause);
  }
}

begin();

// Tasks: every task (scheduled ones included), newest first, with filters (status, owner,
// stream, level, created between), counts per status, and a search by title or id prefix. It
// shows the newest 200 matching tasks and a "Show N more" button that reads the next pages
// (`next_offset` of `GET /v1/tasks`) until every task is shown. The list reloads itself — at
// most twice a second — when a task is created or changes state, and after missed events; the
// focus (a task's link, a chip) survives the reload. The counts are exact: the server counts
// every matching task per status, whatever the status filter.

import { taskPages, failed } from './api.js';
import { h, put, putKeeping, badge, when, taskLink, triggerText, debounce, throttle, zone, latest } from './dom.js';

/** Tasks per page. */
const PAGE = 200;

const STATUSES = ['scheduled', 'pending', 'running', 'waiting_input', 'paused', 'completed', 'failed', 'cancelled'];

/** The filter form's fields, and the query they make for `GET /v1/tasks`. */
function filters(onChange) {
  const status = h('select', { name: 'status', id: 'f-status' },
    h('option', { value: '' }, 'any'), STATUSES.map((s) => h('option', { value: s }, s.replace('_', ' '))));
  const owner = h('input', { name: 'owner', id: 'f-owner', placeholder: 'qq:10001 or planner:…', autocomplete: 'off' });
  const stream = h('input', { name: 'stream', id: 'f-stream', placeholder: 'qq:group:42', autocomplete: 'off' });
  const level = h('select', { name: 'level', id: 'f-level' },
    h('option', { value: '' }, 'any'), h('option', { value: 'agent' }, 'agent'), h('option', { value: 'instant' }, 'instant'));
  const since = h('input', { name: 'since', id: 'f-since', type: 'datetime-local' });
  const until = h('input', { name: 'until', id: 'f-until', type: 'datetime-local' });
  const search = h('input', { name: 'q', id: 'f-q', type: 'search', placeholder: 'title or id prefix', autocomplete: 'off' });
  const field = (label, input) => h('label', { class: 'field' }, h('span', {}, label), input);
  const form = h('form', { class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); onChange(); } },
    field('Status', status), field('Owner', owner), field('Stream', stream), field('Level', level),
    field(`Created from (${zone()})`, since), field('until', until), field('Search', search),
    h('div', { class: 'actions' },
      h('button', { type: 'submit' }, 'Filter'),
      h('button', { type: 'button', class: 'quiet', onclick: () => { form.reset(); onChange(); } }, 'Clear')));
  for (const input of [status, level, since, until]) input.addEventListener('change', onChange);
  search.addEventListener('input', debounce(onChange, 300));
  const query = () => {
    const q = new URLSearchParams({ counts: 'true' });
    if (status.value) q.set('status', status.value);
    if (owner.value.trim()) q.set('owner', owner.value.trim());
    if (stream.value.trim()) q.set('stream_id', stream.value.trim());
    if (level.value) q.set('level', level.value);
    if (since.value) q.set('since', new Date(since.value).toISOString());
    if (until.value) q.set('until', new Date(until.value).toISOString());
    if (search.value.trim()) q.set('q', search.value.trim());
    return q;
  };
  return { form, status, query };
}

export function render(main) {
  const counts = h('div', { class: 'counts', role: 'group', 'aria-label': 'Tasks per status' });
  const body = h('tbody', { id: 'task-rows' });
  const messages = h('div');
  const summary = h('p', { class: 'muted', id: 'task-summary' });
  const more = h('div', { class: 'more' });
  // How many tasks the person asked to see ("Show N more" adds a page).
  let wanted = PAGE;
  // A new filter starts again from the first page.
  const fresh = () => {
    wanted = PAGE;
    load();
  };
  const { form, status, query } = filters(fresh);
  put(main, h('h1', {}, 'Tasks'), form, counts, messages, summary,
    h('div', { class: 'table-wrap' },
      h('table', { class: 'tasks' },
        h('thead', {}, h('tr', {},
          ['Task', 'Status', 'Level', 'Owner', 'Stream', 'Trigger', 'Created', 'Next run'].map((c) => h('th', { scope: 'col' }, c)))),
        body)),
    more);

  const load = latest(async (current) => {
    try {
      const { tasks, first, next } = await taskPages(query(), wanted);
      if (!current()) return;
      put(messages);
      showCounts(counts, status, first.counts || {}, fresh);
      put(summary, `${tasks.length} of ${first.total} shown`);
      putKeeping(body, tasks.length ? tasks.map(row)
        : h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No task matches.')));
      const left = first.total - tasks.length;
      putKeeping(more, next !== null && left > 0 ? h('button', {
        type: 'button', id: 'more-tasks', class: 'quiet',
        onclick: () => { wanted += PAGE; load(); },
      }, `Show ${Math.min(PAGE, left)} more`) : null);
    } catch (error) {
      if (current()) failed(error, put(messages));
    }
  });

  const reload = throttle(load, 500);
  load();
  return {
    onEvent(name) {
      if (name === 'created' || name === 'status' || name === 'changed') reload();
    },
    resync: reload,
    dispose: reload.cancel,
  };
}

/** The per-status chips (each one filters by its status). */
function showCounts(counts, status, byStatus, fresh) {
  const total = Object.values(byStatus).reduce((a, b) => a + b, 0);
  const chip = (value, label, n) => h('button', {
    type: 'button', class: 'chip', id: `chip-${value || 'all'}`, 'aria-pressed': String(status.value === value),
    onclick: () => { status.value = value; fresh(); },
  }, h('span', {}, label), h('b', {}, String(n)));
  putKeeping(counts, chip('', 'all', total), STATUSES.map((s) => chip(s, s.replace('_', ' '), byStatus[s] || 0)));
}

function row(task) {
  // data-label holds the fixed column name, shown before each cell on a phone's width.
  return h('tr', {},
    h('td', { class: 'title', 'data-label': 'Task' }, taskLink(task), h('small', { class: 'id' }, task.short_id)),
    h('td', { 'data-label': 'Status' }, badge(task.status)),
    h('td', { 'data-label': 'Level' }, task.level),
    h('td', { 'data-label': 'Owner' }, task.owner),
    h('td', { 'data-label': 'Stream' }, task.stream_id),
    h('td', { 'data-label': 'Trigger' }, triggerText(task.trigger)),
    h('td', { 'data-label': 'Created' }, when(task.created_at)),
    h('td', { 'data-label': 'Next run' }, task.status === 'scheduled' ? when(task.scheduled_at) : '—'));
}

// Tasks: every task (scheduled ones included), newest first, with filters (status, owner,
// stream, level, created between), counts per status, and a search by title or id prefix. The
// list reloads itself when a task is created or changes state.

import { api, failed } from './api.js';
import { h, put, badge, when, taskLink, triggerText, debounce, zone } from './dom.js';

const STATUSES = ['scheduled', 'pending', 'running', 'waiting_input', 'paused', 'completed', 'failed', 'cancelled'];

export function render(main) {
  const field = (label, input) => h('label', { class: 'field' }, h('span', {}, label), input);
  const status = h('select', { name: 'status', id: 'f-status' },
    h('option', { value: '' }, 'any'), STATUSES.map((s) => h('option', { value: s }, s.replace('_', ' '))));
  const owner = h('input', { name: 'owner', id: 'f-owner', placeholder: 'qq:10001 or planner:…', autocomplete: 'off' });
  const stream = h('input', { name: 'stream', id: 'f-stream', placeholder: 'qq:group:42', autocomplete: 'off' });
  const level = h('select', { name: 'level', id: 'f-level' },
    h('option', { value: '' }, 'any'), h('option', { value: 'agent' }, 'agent'), h('option', { value: 'instant' }, 'instant'));
  const since = h('input', { name: 'since', id: 'f-since', type: 'datetime-local' });
  const until = h('input', { name: 'until', id: 'f-until', type: 'datetime-local' });
  const search = h('input', { name: 'q', id: 'f-q', type: 'search', placeholder: 'title or id prefix', autocomplete: 'off' });
  const counts = h('div', { class: 'counts', role: 'group', 'aria-label': 'Tasks per status' });
  const body = h('tbody', { id: 'task-rows' });
  const messages = h('div');
  const summary = h('p', { class: 'muted', id: 'task-summary' });

  const form = h('form', { class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); load(); } },
    field('Status', status), field('Owner', owner), field('Stream', stream), field('Level', level),
    field(`Created from (${zone()})`, since), field('until', until), field('Search', search),
    h('div', { class: 'actions' },
      h('button', { type: 'submit' }, 'Filter'),
      h('button', { type: 'button', class: 'quiet', onclick: () => { form.reset(); load(); } }, 'Clear')));
  for (const input of [status, level, since, until]) input.addEventListener('change', () => load());
  search.addEventListener('input', debounce(() => load(), 300));

  put(main,
    h('h1', {}, 'Tasks'),
    form, counts, messages, summary,
    h('div', { class: 'table-wrap' },
      h('table', { class: 'tasks' },
        h('thead', {}, h('tr', {},
          ['Task', 'Status', 'Level', 'Owner', 'Stream', 'Trigger', 'Created', 'Next run'].map((c) => h('th', { scope: 'col' }, c)))),
        body)));

  let generation = 0;
  async function load() {
    const mine = ++generation;
    const query = new URLSearchParams({ limit: '200', counts: 'true' });
    if (status.value) query.set('status', status.value);
    if (owner.value.trim()) query.set('owner', owner.value.trim());
    if (stream.value.trim()) query.set('stream_id', stream.value.trim());
    if (level.value) query.set('level', level.value);
    if (since.value) query.set('since', new Date(since.value).toISOString());
    if (until.value) query.set('until', new Date(until.value).toISOString());
    if (search.value.trim()) query.set('q', search.value.trim());
    try {
      const list = await api(`/v1/tasks?${query}`);
      if (mine !== generation) return;
      put(messages);
      showCounts(list.counts || {}, list.counts_complete);
      put(summary, `${list.tasks.length} shown${list.tasks.length === 200 ? ' (the newest 200; filter to see others)' : ''}`);
      put(body, list.tasks.length ? list.tasks.map(row)
        : h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No task matches.')));
    } catch (error) {
      if (mine === generation) failed(error, put(messages));
    }
  }

  function showCounts(byStatus, complete) {
    const total = Object.values(byStatus).reduce((a, b) => a + b, 0);
    const chip = (value, label, n) => h('button', {
      type: 'button', class: 'chip', 'aria-pressed': String(status.value === value),
      onclick: () => { status.value = value; load(); },
    }, h('span', {}, label), h('b', {}, String(n)));
    put(counts, chip('', 'all', total), STATUSES.map((s) => chip(s, s.replace('_', ' '), byStatus[s] || 0)),
      complete === false ? h('span', { class: 'muted' }, '(counted over the newest 10 000)') : null);
  }

  const reload = debounce(load, 200);
  load();
  return {
    onEvent(name) {
      if (name === 'created' || name === 'status') reload();
    },
  };
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

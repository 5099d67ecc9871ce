// Schedules: delayed and cron tasks that are still active, the next fire time in the viewer's
// time zone, the last run and how it ended (from the status log), and pause (while it runs or
// waits for an answer: a task waiting for its time is cancelled, not paused), resume and cancel.

import { api, failed } from './api.js';
import { h, put, badge, when, relative, taskLink, triggerText, zone, notice, debounce } from './dom.js';

const ACTIVE = 'scheduled,pending,running,waiting_input,paused';

export function render(main) {
  const body = h('tbody', { id: 'schedule-rows' });
  const messages = h('div');
  put(main, h('h1', {}, 'Schedules'),
    h('p', { class: 'muted' }, `Delayed and recurring (cron) tasks. Times are in your time zone, ${zone()}. A task waiting for its time cannot be paused (cancel it); one that runs or waits for an answer can.`),
    messages,
    h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Task', 'Trigger', 'Status', 'Next run', 'Runs', 'Last run', ''].map((c) => h('th', { scope: 'col' }, c)))),
      body)));

  async function load() {
    try {
      const { tasks } = await api(`/v1/tasks?status=${ACTIVE}&limit=500`);
      const scheduled = tasks.filter((t) => t.trigger && t.trigger.kind !== 'now');
      scheduled.sort((a, b) => new Date(a.scheduled_at || 0) - new Date(b.scheduled_at || 0));
      put(body, scheduled.length ? scheduled.map((t) => row(t, act))
        : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'Nothing is scheduled.')));
    } catch (error) {
      failed(error, put(messages));
    }
  }

  async function act(task, what) {
    put(messages);
    try {
      await api(`/v1/tasks/${encodeURIComponent(task.id)}/${what}`, { method: 'POST' });
      put(messages, notice(`${task.short_id}: ${what} done.`, 'ok'));
      load();
    } catch (error) {
      failed(error, messages);
    }
  }

  const reload = debounce(load, 200);
  load();
  return {
    onEvent(name) {
      if (name === 'status' || name === 'created') reload();
    },
  };
}

/** The last finished run of a task: the last completed/failed line of its status log. */
function lastRun(task) {
  const log = task.status_log || [];
  for (let i = log.length - 1; i >= 0; i -= 1) {
    if (['completed', 'failed'].includes(log[i].status)) return log[i];
  }
  return null;
}

function row(task, act) {
  const last = lastRun(task);
  const s = task.status;
  const button = (label, what, enabled) => h('button', { type: 'button', class: 'small', disabled: !enabled, onclick: () => act(task, what) }, label);
  return h('tr', {},
    h('td', { 'data-label': 'Task' }, taskLink(task), h('small', { class: 'id' }, task.short_id)),
    h('td', { 'data-label': 'Trigger' }, triggerText(task.trigger)),
    h('td', { 'data-label': 'Status' }, badge(s)),
    h('td', { 'data-label': 'Next run' }, s === 'scheduled' ? [when(task.scheduled_at), h('small', { class: 'muted' }, ` ${relative(task.scheduled_at)}`)] : '—'),
    h('td', { 'data-label': 'Runs' }, String(task.metadata?.cron_runs || 0)),
    h('td', { 'data-label': 'Last run' }, last ? [when(last.at), ' ', badge(last.status)] : 'not yet'),
    h('td', { class: 'actions' },
      button('Pause', 'pause', ['pending', 'running', 'waiting_input'].includes(s)),
      button('Resume', 'resume', s === 'paused'),
      button('Cancel', 'cancel', true)));
}

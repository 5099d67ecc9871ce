// Schedules: delayed and cron tasks that are still active, the next fire time in the viewer's
// time zone, the last run and how it ended (from the status log), and pause, resume and cancel
// (in two steps, like a task's page).
// Pausing a task that waits for its time stops its timer; resumed, it waits for that time again
// (or runs at once when the time passed meanwhile). The list reloads (at most twice a second)
// on status changes and new tasks, and after missed events.

import { api, allTasks, failed, PAUSABLE } from './api.js';
import { h, put, putKeeping, badge, when, relative, taskLink, triggerText, zone, notice, throttle, latest, twoStep } from './dom.js';

const ACTIVE = [...PAUSABLE, 'paused'].join(',');

export function render(main) {
  const body = h('tbody', { id: 'schedule-rows' });
  const messages = h('div');
  put(main, h('h1', {}, 'Schedules'),
    h('p', { class: 'muted' }, `Delayed and recurring (cron) tasks. Times are in your time zone, ${zone()}. A paused task does not fire; resumed, it waits for its next run again, or runs at once if that time has passed.`),
    messages,
    h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Task', 'Trigger', 'Status', 'Next run', 'Runs', 'Last run', ''].map((c) => h('th', { scope: 'col' }, c)))),
      body)));

  // Cancel asks first, as on a task's page; the armed state survives the list's redraws.
  const confirm = twoStep();
  const load = latest(async (current) => {
    try {
      const tasks = await allTasks({ status: ACTIVE });
      if (!current()) return;
      const scheduled = tasks.filter((t) => t.trigger && t.trigger.kind !== 'now');
      scheduled.sort((a, b) => new Date(a.scheduled_at || 0) - new Date(b.scheduled_at || 0));
      putKeeping(body, scheduled.length ? scheduled.map((t) => row(t, act, confirm))
        : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'Nothing is scheduled.')));
    } catch (error) {
      if (current()) failed(error, put(messages));
    }
  });

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

  const reload = throttle(load, 500);
  load();
  return {
    onEvent(name) {
      if (name === 'status' || name === 'created' || name === 'changed') reload();
    },
    resync: reload,
    dispose: () => {
      reload.cancel();
      confirm.dispose();
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

function row(task, act, confirm) {
  const last = lastRun(task);
  const s = task.status;
  const button = (label, what, enabled) => h('button', {
    type: 'button', class: 'small', id: `${what}-${task.id}`, disabled: !enabled, onclick: () => act(task, what),
  }, label);
  // A paused task's time, when it will wait for it again on resume.
  const due = s === 'scheduled' || (s === 'paused' && new Date(task.scheduled_at) > Date.now());
  return h('tr', {},
    h('td', { 'data-label': 'Task' }, taskLink(task), h('small', { class: 'id' }, task.short_id)),
    h('td', { 'data-label': 'Trigger' }, triggerText(task.trigger)),
    h('td', { 'data-label': 'Status' }, badge(s)),
    h('td', { 'data-label': 'Next run' }, due ? [when(task.scheduled_at), h('small', { class: 'muted' }, ` ${relative(task.scheduled_at)}${s === 'paused' ? ', paused' : ''}`)] : '—'),
    h('td', { 'data-label': 'Runs' }, String(task.metadata?.cron_runs || 0)),
    h('td', { 'data-label': 'Last run' }, last ? [when(last.at), ' ', badge(last.status)] : 'not yet'),
    h('td', { class: 'actions' },
      button('Pause', 'pause', PAUSABLE.includes(s)),
      button('Resume', 'resume', s === 'paused'),
      confirm({ class: 'small', id: `cancel-${task.id}` }, 'Cancel', 'Really cancel?', () => act(task, 'cancel'))));
}

// Health: the instance and the state of each part (store, model, channels, MaiBot bridge), and
// small charts of the queue depth, running tasks, tasks finished per minute, model latency and
// model error rate. Their history comes from `GET /v1/health/history`: samples the server takes
// every 10 seconds of its own metrics (`mai_tasks`, `mai_tasks_finished_total`, the model
// metering) and keeps in memory for an hour (it starts empty when `serve` starts); rates are the
// differences between two samples. The page counts nothing itself from events: it reads the
// whole history again every 10 seconds while open, and at once after a reconnect or missed
// events, so it never drifts.

import { api, failed } from './api.js';
import { h, put, when, latest, refreshing } from './dom.js';
import { lineChart } from './charts.js';

export function render(main) {
  const parts = h('div', { class: 'cards' });
  const charts = h('div', { class: 'charts', id: 'charts' });
  const messages = h('div');
  put(main, h('h1', {}, 'Health'), messages, parts, h('h2', {}, 'The last hour'),
    h('p', { class: 'muted' }, 'Sampled by the server from its metrics every 10 s and kept in memory for an hour (since this serve started).'),
    charts);

  // The report and the history are drawn each on its own: one failing (the store down) does
  // not blank the other.
  const load = latest(async (current) => {
    const [report, history] = await Promise.allSettled([api('/v1/health', { ok: [503] }), api('/v1/health/history')]);
    if (!current()) return;
    put(messages);
    if (report.status === 'fulfilled') put(parts, partsOf(report.value));
    else failed(report.reason, put(parts));
    if (history.status === 'fulfilled') put(charts, buildCharts([...history.value.samples, history.value.now]));
    else failed(history.reason, put(charts));
  });

  return refreshing(load);
}

function partsOf(report) {
  return [instance(report), part('Store', report.store.ok, report.store.error),
    part('Model', report.model.ok, report.model.error, report.model.last_call_at ? `last call ${when(report.model.last_call_at)}` : 'not called yet'),
    Object.entries(report.channels || {}).map(([name, c]) => part(`Channel ${name}`, c.state === 'local' || c.connected, c.last_error, c.state)),
    part('MaiBot bridge', bridgeUp(report.bridge.state), null,
      report.bridge.via ? `${report.bridge.state} (through ${report.bridge.via})` : report.bridge.state)];
}

function instance(report) {
  const i = report.instance;
  return h('article', { class: 'card', id: 'instance' },
    h('h2', {}, 'Instance ', h('span', { class: `status ${report.status === 'ok' ? 's-completed' : 's-failed'}` }, report.status)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Instance id'), h('dd', { id: 'instance-id' }, i.id ?? '—'),
      h('dt', {}, 'Version'), h('dd', {}, i.version),
      h('dt', {}, 'Process'), h('dd', {}, String(i.pid)),
      h('dt', {}, 'Started'), h('dd', {}, when(i.started_at)),
      h('dt', {}, 'Up'), h('dd', {}, `${Math.round(i.uptime_secs / 60)} min`)));
}

/** The bridge is up when connected (here, or to another instance this one goes through:
 *  "elsewhere"), down when the MaiBot host waits for it, and neither when this service does not
 *  use one ("not used"). */
function bridgeUp(state) {
  if (state === 'connected' || state === 'elsewhere') return true;
  if (state === 'disconnected') return false;
  return null;
}

function part(name, ok, error, detail) {
  const state = ok === null || ok === undefined ? 'unknown' : ok ? 'up' : 'down';
  return h('article', { class: 'card part' },
    h('h3', {}, name, ' ', h('span', { class: `status ${state === 'up' ? 's-completed' : state === 'down' ? 's-failed' : 's-pending'}` }, state)),
    detail ? h('p', { class: 'muted' }, detail) : null,
    error ? h('p', { class: 'text error' }, error) : null);
}

/** Charts from cumulative samples: gauges as they are, rates from consecutive differences. */
function buildCharts(samples) {
  const at = (s) => new Date(s.at);
  const gauge = (state) => samples.map((s) => ({ t: at(s), v: s.active[state] ?? 0 }));
  // A rate over less than 5 s (the sample taken for this answer, just after a kept one) would
  // be noise: such points are left out.
  const rate = (pick) => samples.slice(1).map((s, i) => {
    const minutes = (at(s) - at(samples[i])) / 60000;
    return { t: at(s), v: minutes >= 5 / 60 ? (pick(s) - pick(samples[i])) / minutes : null };
  });
  const perCall = (pick) => samples.slice(1).map((s, i) => {
    const calls = s.model.calls - samples[i].model.calls;
    return { t: at(s), v: calls > 0 ? pick(s, samples[i]) / calls : null };
  });
  return [
    lineChart('Queue depth (pending)', gauge('pending'), (v) => `${v}`),
    lineChart('Running', gauge('running'), (v) => `${v}`),
    lineChart('Waiting for people', gauge('waiting_input'), (v) => `${v}`),
    lineChart('Tasks finished per minute', rate((s) => s.finished), (v) => v.toFixed(1)),
    lineChart('Model latency (mean)', perCall((s, p) => (s.model.seconds - p.model.seconds) * 1000), (v) => `${Math.round(v)} ms`),
    lineChart('Model error rate', perCall((s, p) => s.model.errors - p.model.errors), (v) => `${Math.round(v * 100)} %`),
  ];
}

// Tools and roles: the role × tool matrix of the agent loop (what a task of each role is shown
// every round, essential or discoverable, and what the schemas cost per role) — the same
// registry `mai-agent tools` prints — and the MCP servers with their state, tools and last error.
// The page reads both again every 10 seconds while open (an MCP server's state changes without
// an event), and at once after a reconnect or missed events.

import { api, failed } from './api.js';
import { h, put, latest, refreshing } from './dom.js';

const ROLES = ['guest', 'user', 'admin'];

export function render(main) {
  const matrix = h('div', { class: 'table-wrap' });
  const servers = h('div', { class: 'cards', id: 'mcp-servers' });
  const messages = h('div');
  put(main, h('h1', {}, 'Tools and roles'), messages,
    h('h2', {}, 'Role × tool'), matrix,
    h('h2', {}, 'MCP servers'), servers);

  const load = latest(async (current) => {
    try {
      const [tools, mcp] = await Promise.all([api('/v1/tools'), api('/v1/mcp/servers')]);
      if (!current()) return;
      put(messages);
      put(matrix, table(tools));
      put(servers, mcp.servers.length ? mcp.servers.map(server)
        : h('p', { class: 'empty' }, 'No MCP server is configured ([[mcp.servers]] in the config).'));
    } catch (error) {
      if (current()) failed(error, put(messages));
    }
  });

  return refreshing(load);
}

function table(tools) {
  const mark = (tool, role) => (tool.roles.includes(role)
    ? h('td', { class: 'yes', 'data-label': role }, h('span', { 'aria-label': 'yes' }, '✓'))
    : h('td', { class: 'no', 'data-label': role }, h('span', { 'aria-label': 'no' }, '·')));
  return h('table', { class: 'matrix', id: 'matrix' },
    h('thead', {}, h('tr', {},
      h('th', { scope: 'col' }, 'Tool'), h('th', { scope: 'col' }, 'Kind'), h('th', { scope: 'col' }, 'Lowest role'),
      ROLES.map((r) => h('th', { scope: 'col' }, r)), h('th', { scope: 'col' }, 'What it does'))),
    h('tbody', {}, tools.tools.map((t) => h('tr', {},
      h('th', { scope: 'row', class: 'tool' }, h('code', {}, t.name)),
      h('td', { 'data-label': 'Kind' }, t.visibility),
      h('td', { 'data-label': 'Lowest role' }, t.min_role),
      ROLES.map((r) => mark(t, r)),
      h('td', { class: 'muted', 'data-label': 'What it does' }, t.description)))),
    h('tfoot', {}, h('tr', {},
      h('th', { scope: 'row', colspan: 3 }, 'Schema tokens per round (cl100k)'),
      ROLES.map((r) => h('td', { class: 'num' }, String(tools.schema_tokens[r] ?? ''))),
      h('td', {}))));
}

function server(s) {
  return h('article', { class: 'card' },
    h('h3', {}, h('code', {}, s.name), ' ', h('span', { class: `status s-${s.state === 'ready' ? 'completed' : s.state === 'failed' ? 'failed' : 'pending'}` }, s.state)),
    h('p', { class: 'muted' }, `${s.tool_count} tool(s), ${s.restarts} restart(s)${s.pid ? `, pid ${s.pid}` : ''}`),
    s.last_error ? h('p', { class: 'text error' }, `Last error: ${s.last_error}`) : null,
    s.tools.length ? h('ul', {}, s.tools.map((t) => h('li', {}, h('code', {}, t.name), ` (${t.raw_name}, from ${t.min_role})`))) : null);
}

// Building the page without HTML strings: every element is created with createElement and every
// piece of text — above all task and chat text — goes in as a text node (textContent), never as
// HTML and never into an attribute. The Content-Security-Policy (Trusted Types) makes any
// innerHTML assignment throw, so a slip cannot turn text into markup.

/** An element: `h('td', {class: 'x'}, 'text', child)`. Props: class, id, for, type, name,
 *  value, placeholder, href (only links built here from ids), role, aria-*, data-*, hidden,
 *  disabled, title (fixed UI strings only), and on* handlers. Children: strings become text. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (key === 'value') {
      el.value = value;
    } else if (value === true) {
      el.setAttribute(key, '');
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces everything inside `el`. */
export function put(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Replaces everything inside `el` like `put`, for content rebuilt by live updates while a
 *  person may be typing in it: what was typed into its fields (inputs, text areas, selects with
 *  an id) goes into the new fields with the same id, and the element that had the focus (by its
 *  id) gets it back, caret included; a `<details>` with an id keeps its state (opened stays
 *  open, closed stays closed). Fields, links and controls that must survive need stable ids. */
export function putKeeping(el, ...children) {
  const typed = new Map();
  for (const field of el.querySelectorAll('input[id], textarea[id], select[id]')) {
    if (field.value !== '') {
      typed.set(field.id, { value: field.value, start: field.selectionStart, end: field.selectionEnd });
    }
  }
  const folds = [...el.querySelectorAll('details[id]')].map((d) => [d.id, d.open]);
  const active = document.activeElement;
  const focused = active && active !== el && el.contains(active) && active.id ? active.id : null;
  // A fold's summary (it has no id of its own) is found again through its fold's id.
  const summaryOf =
    !focused && active && active.tagName === 'SUMMARY' && el.contains(active)
      ? active.parentElement?.closest('details[id]')?.id ?? null
      : null;
  put(el, ...children);
  const inside = (id) => {
    const found = document.getElementById(id);
    return found && el.contains(found) ? found : null;
  };
  for (const [id, was] of typed) {
    const field = inside(id);
    if (!field || field.disabled) continue;
    field.value = was.value;
    if (typeof was.start === 'number' && typeof field.setSelectionRange === 'function') {
      try {
        field.setSelectionRange(was.start, was.end);
      } catch {
        // a field without a caret (a select, a number input)
      }
    }
  }
  for (const [id, open] of folds) {
    const fold = inside(id);
    if (fold) fold.open = open;
  }
  if (focused) inside(focused)?.focus({ preventScroll: true });
  if (summaryOf) inside(summaryOf)?.querySelector(':scope > summary')?.focus({ preventScroll: true });
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

/** An SVG element with numeric/fixed attributes (charts only: never text from a task). */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  append(el, children);
  return el;
}

/** A local date and time (the viewer's time zone). */
export function when(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return '—';
  return date.toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

/** "3 min ago", "in 2 h". */
export function relative(iso, now = Date.now()) {
  if (!iso) return '';
  const seconds = Math.round((new Date(iso).getTime() - now) / 1000);
  const abs = Math.abs(seconds);
  const [value, unit] = abs < 60 ? [abs, 's'] : abs < 3600 ? [Math.round(abs / 60), 'min']
    : abs < 86400 ? [Math.round(abs / 3600), 'h'] : [Math.round(abs / 86400), 'd'];
  return seconds < 0 ? `${value} ${unit} ago` : `in ${value} ${unit}`;
}

/** The viewer's time zone name. */
export function zone() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';
}

/** A status badge. */
export function badge(status) {
  return h('span', { class: `status s-${String(status).replace(/[^a-z_]/g, '')}` }, String(status).replace('_', ' '));
}

/** A link to a task's detail page (the id is a UUID; encoded anyway), with a stable id
 *  (`link-<task id>`) so a redraw gives the keyboard focus back to it; a task without a title
 *  shows its short id. */
export function taskLink(task, text) {
  return h('a', { href: `#/task/${encodeURIComponent(task.id)}`, id: `link-${task.id}` },
    text || task.title || task.short_id);
}

/** What a trigger means, in words. */
export function triggerText(trigger) {
  if (!trigger) return '';
  if (trigger.kind === 'cron') return `cron ${trigger.expr}${trigger.timezone ? ` (${trigger.timezone})` : ''}`;
  if (trigger.kind === 'delay') return `after ${trigger.seconds} s`;
  return 'now';
}

/** A message line for a form: `role="alert"` for errors. */
export function notice(text, kind = 'info') {
  return h('p', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/** Calls `fn` once `ms` have passed without another call (typing in a search box). */
export function debounce(fn, ms = 250) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** Runs `fn` at most once per `ms`, for reloads triggered by events: the first call runs at
 *  once; calls during the following `ms` fold into one trailing run at its end, so a steady
 *  stream of events refreshes the page every `ms` — never more often, and never starved. */
export function throttle(fn, ms = 500) {
  let last = -Infinity;
  let timer = null;
  const run = () => {
    timer = null;
    last = Date.now();
    fn();
  };
  const throttled = () => {
    if (timer !== null) return;
    const wait = last + ms - Date.now();
    if (wait <= 0) run();
    else timer = setTimeout(run, wait);
  };
  throttled.cancel = () => {
    clearTimeout(timer);
    timer = null;
  };
  return throttled;
}

/** A page that also refreshes on a clock (state no event announces): `load` now, throttled to
 *  once per second, and every `every` ms; what a page module returns (`resync`, `dispose`). */
export function refreshing(load, every = 10000) {
  const reload = throttle(load, 1000);
  reload();
  const timer = setInterval(reload, every);
  return {
    resync: reload,
    dispose: () => {
      clearInterval(timer);
      reload.cancel();
    },
  };
}

/** For a page's reads, which live updates can overlap: `const load = latest(async (current) =>
 *  …)`. `current()` turns false once a newer call has started, so the answer of an older,
 *  slower read is dropped instead of being drawn over a newer one. */
export function latest(read) {
  let generation = 0;
  return (...args) => {
    const mine = ++generation;
    return read(() => mine === generation, ...args);
  };
}

/** Two-step buttons for what cannot be undone (Cancel → "Really cancel?"), in content that live
 *  updates redraw: the first press arms the button for `ms`, a second press within that time
 *  confirms. Whether a button is armed is kept here, by the button's id, not on the element, so
 *  a redraw in between keeps it. `make(props, label, ask, confirm)` builds one (props need an
 *  id); `make.dispose()` stops the timers. */
export function twoStep(ms = 6000) {
  const armed = new Map();
  const look = (button, on, label, ask) => {
    button.textContent = on ? ask : label;
    button.classList.toggle('danger', on);
  };
  const make = (props, label, ask, confirm) => {
    const { id } = props;
    const button = h('button', { type: 'button', ...props, onclick: () => {
      if (armed.has(id)) {
        clearTimeout(armed.get(id));
        armed.delete(id);
        look(button, false, label, ask);
        confirm();
        return;
      }
      armed.set(id, setTimeout(() => {
        armed.delete(id);
        const shown = document.getElementById(id);
        if (shown) look(shown, false, label, ask);
      }, ms));
      look(button, true, label, ask);
    } });
    look(button, armed.has(id), label, ask);
    return button;
  };
  make.dispose = () => {
    for (const timer of armed.values()) clearTimeout(timer);
    armed.clear();
  };
  return make;
}

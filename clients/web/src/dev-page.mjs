// The development page's wiring: the form of index.html calls a local Muster directly (same
// origin, served by `muster serve --dev-web-dir clients/web` under /dev/web/).
//
// Settings come from the address's fragment, which the browser never sends to a server:
//   #token=<conn token>&target=<target id>&ip=<address sent as X-Client-IP>
// (`target` defaults to docs/intro, `ip` to 127.0.0.1).
import { mountEditForm } from './edit-form.mjs';

/** An `api` for mountEditForm that calls Muster itself, as Conn's backend would. */
export function directMusterApi({ base = '', token, clientIp }) {
  const headers = {
    authorization: `Bearer ${token}`,
    'content-type': 'application/json',
  };
  const call = async (path, init) => {
    const res = await fetch(`${base}${path}`, { method: 'POST', ...init });
    const text = await res.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = { error: { code: `HTTP_${res.status}`, message: text } };
    }
    return { status: res.status, body };
  };
  return {
    async challenge() {
      const { status, body } = await call('/v1/edits/challenge', { headers, body: '{}' });
      if (status !== 200) {
        throw new Error(`no challenge (${body?.error?.code ?? status})`);
      }
      return body;
    },
    submit(proposal) {
      return call('/v1/edits', {
        headers: { ...headers, 'x-client-ip': clientIp },
        body: JSON.stringify(proposal),
      });
    },
  };
}

const params = new URLSearchParams(location.hash.slice(1));
const form = document.getElementById('edit-form');
const target = params.get('target') || 'docs/intro';
form.dataset.target = target;
document.querySelector('[data-target-label]').textContent = target;
const token = params.get('token');
if (token) {
  mountEditForm(form, directMusterApi({ token, clientIp: params.get('ip') || '127.0.0.1' }));
} else {
  const status = form.querySelector('[data-status]');
  status.dataset.state = 'error';
  status.textContent =
    'No token: open this page as /dev/web/#token=<conn token> (cargo xtask up prints one).';
  form.querySelector('button[type="submit"]').disabled = true;
}

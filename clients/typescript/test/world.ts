/**
 * What the tests share: the server the global setup started, a person deciding at the
 * approver's web form (logged in, with CSRF, as a browser would post), and a way to find the
 * call an agent is waiting on.
 */
import { inject } from 'vitest';

import { Client, type ClientOptions, type CallState } from '../src/index.js';
import { APPROVER, PASSWORD } from './server.js';

export const server = inject('server');

// Under the gate's limit: allowed. Over it: held for a person. A wire over 100: refused.
export const SMALL_PAYMENT = { amount: '12.50', payee: 'bob' };
export const BIG_PAYMENT = { amount: '600.00', payee: 'bob' };
export const BIG_WIRE = { amount: '500.00' };
export const BOOKING = { amount: '5.00' };

export function clientFor(options: ClientOptions = {}): Client {
  return new Client({ url: server.url, token: server.token, ...options });
}

/** A run id of its own for each test, to find its calls among the others. */
export function newRunId(): string {
  return `ts-${crypto.randomUUID()}`;
}

const CSRF_INPUT = /name="csrfmiddlewaretoken" value="([^"]+)"/;
const DIGEST_INPUT = /name="arguments_sha256" value="([0-9a-f]{64})"/;

/** A person at the approver's forms, with the cookies a browser would keep. */
export class Approver {
  readonly #cookies = new Map<string, string>();

  static async login(username = APPROVER, password = PASSWORD): Promise<Approver> {
    const approver = new Approver();
    const page = await approver.#send('/accounts/login/');
    const token = CSRF_INPUT.exec(await page.text());
    if (token === null) {
      throw new Error('no CSRF token on the login page');
    }
    const answer = await approver.#send('/accounts/login/', {
      csrfmiddlewaretoken: token[1] ?? '',
      username,
      password,
    });
    if (answer.status !== 302) {
      throw new Error(`login failed: HTTP ${answer.status}`);
    }
    return approver;
  }

  /** Decide at the call page's form; `edited` is the approver's edit of the arguments. */
  async decide(
    callId: string,
    decision: { approve: boolean; comment?: string; edited?: string },
  ): Promise<number> {
    const page = await this.#send(`/calls/${callId}/`);
    const html = await page.text();
    const token = CSRF_INPUT.exec(html);
    const digest = DIGEST_INPUT.exec(html);
    if (token === null || digest === null) {
      throw new Error('no decision form on the call page');
    }
    const answer = await this.#send(`/calls/${callId}/${decision.approve ? 'approve' : 'deny'}`, {
      csrfmiddlewaretoken: token[1] ?? '',
      arguments_sha256: digest[1] ?? '',
      comment: decision.comment ?? '',
      scope: 'once',
      ...(decision.edited !== undefined && { arguments: decision.edited }),
    });
    await answer.body?.cancel();
    return answer.status;
  }

  async #send(path: string, form?: Record<string, string>): Promise<Response> {
    const cookie = [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    const response = await fetch(server.url + path, {
      method: form === undefined ? 'GET' : 'POST',
      redirect: 'manual',
      headers: {
        Cookie: cookie,
        Referer: server.url + path,
        ...(form !== undefined && { 'Content-Type': 'application/x-www-form-urlencoded' }),
      },
      ...(form !== undefined && { body: new URLSearchParams(form).toString() }),
    });
    for (const line of response.headers.getSetCookie()) {
      const [pair = ''] = line.split(';');
      const at = pair.indexOf('=');
      this.#cookies.set(pair.slice(0, at), pair.slice(at + 1));
    }
    return response;
  }
}

/** A decision by a person who logs in and decides, as one step. */
export async function decide(
  callId: string,
  decision: { approve: boolean; comment?: string; edited?: string },
): Promise<number> {
  const approver = await Approver.login();
  return approver.decide(callId, decision);
}

/** The call of this run (of any run, without one) that is pending, once it is submitted. */
export async function pendingCall(runId?: string, timeoutMs = 15_000): Promise<CallState> {
  const deadline = Date.now() + timeoutMs;
  const run = runId === undefined ? '' : `&run_id=${encodeURIComponent(runId)}`;
  while (Date.now() < deadline) {
    const response = await fetch(`${server.url}/api/v1/calls?status=pending${run}`, {
      headers: { Authorization: `Bearer ${server.token}` },
    });
    const { items } = (await response.json()) as { items: CallState[] };
    if (items[0] !== undefined) {
      return items[0];
    }
    await new Promise((done) => setTimeout(done, 50));
  }
  throw new Error(`no pending call in run ${runId ?? '(any)'}`);
}

/** The call's state as the service has it now. */
export async function callState(callId: string): Promise<CallState> {
  return clientFor().get(callId);
}

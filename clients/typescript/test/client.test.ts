import { execFile } from 'node:child_process';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { promisify } from 'node:util';

import { describe, expect, it } from 'vitest';

import {
  BadRequest,
  NotApproved,
  RateLimited,
  TimedOut,
  Unauthenticated,
  Unavailable,
} from '../src/index.js';
import { errorFor } from '../src/protocol.js';
import {
  BIG_PAYMENT,
  BIG_WIRE,
  BOOKING,
  SMALL_PAYMENT,
  callState,
  clientFor,
  decide,
  newRunId,
  pendingCall,
  server,
} from './world.js';
import { freePort } from './server.js';

/** The global fetch, with the paths it was asked for kept: which way did a wait go? */
function recordingFetch(): { fetch: typeof fetch; paths: string[] } {
  const paths: string[] = [];
  const recording: typeof fetch = (input, init) => {
    paths.push(new URL(String(input)).pathname);
    return fetch(input, init);
  };
  return { fetch: recording, paths };
}

describe('submit', () => {
  it('answers an allowed call at once', async () => {
    const state = await clientFor().submit({ tool: 'pay', arguments: SMALL_PAYMENT });
    expect(state.status).toBe('allowed');
    expect(state.arguments).toBeNull();
  });

  it('sends the model\'s text exactly as written', async () => {
    const text = '{"amount": "12.50",   "payee": "bob"}';
    const state = await clientFor().submit({ tool: 'pay', arguments: text });
    const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
    expect(state.arguments_sha256).toBe(Buffer.from(digest).toString('hex'));
  });

  it('replays a submit with the same Idempotency-Key as the same call', async () => {
    const client = clientFor();
    const call = { tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId(), idempotencyKey: crypto.randomUUID() };
    const first = await client.submit(call);
    const again = await client.submit(call);
    expect(again.id).toBe(first.id);
    await client.cancel(first);
  });

  it('throws Unauthenticated for a token the service does not know', async () => {
    const client = clientFor({ token: 'cs_not-a-token' });
    await expect(client.submit({ tool: 'pay', arguments: SMALL_PAYMENT })).rejects.toBeInstanceOf(Unauthenticated);
  });

  it('throws BadRequest with the service\'s message for a malformed call', async () => {
    const error = await clientFor()
      .submit({ tool: 'not a tool name', arguments: SMALL_PAYMENT })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(BadRequest);
    expect((error as BadRequest).code).toBe('bad_request');
  });

  it('refuses NaN rather than send it as null', async () => {
    await expect(clientFor().submit({ tool: 'pay', arguments: { amount: Number.NaN } })).rejects.toBeInstanceOf(
      TypeError,
    );
  });

  it('throws Unavailable, naming what failed, when nothing listens', async () => {
    const port = await freePort();
    const client = clientFor({ url: `http://127.0.0.1:${port}` });
    const error = await client.submit({ tool: 'pay', arguments: SMALL_PAYMENT }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Unavailable);
    expect((error as Error).message).toContain(`ECONNREFUSED at http://127.0.0.1:${port}`);
  });
});

describe('errors', () => {
  it('reads Retry-After into RateLimited', async () => {
    const answer = new Response(JSON.stringify({ error: { code: 'rate_limited', message: 'Slow down.' } }), {
      status: 429,
      headers: { 'Retry-After': '7' },
    });
    const error = await errorFor(answer);
    expect(error).toBeInstanceOf(RateLimited);
    expect((error as RateLimited).retryAfter).toBe(7);
    expect(error.message).toContain('The service says: Slow down.');
  });
});

describe('wait', () => {
  it('gets a person\'s approval over the WebSocket', async () => {
    const { fetch, paths } = recordingFetch();
    const client = clientFor({ fetch });
    const state = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId() });
    expect(state.status).toBe('pending');
    const waiting = client.wait(state);
    expect(await decide(state.id, { approve: true, comment: 'fine' })).toBe(303);
    const final = await waiting;
    expect(final.status).toBe('approved');
    expect(final.decision?.comment).toBe('fine');
    expect(paths.filter((path) => path.endsWith('/wait'))).toEqual([]);
  });

  it('gets a person\'s approval over the long-poll when there is no WebSocket', async () => {
    const { fetch, paths } = recordingFetch();
    const client = clientFor({ fetch, webSocket: false });
    const state = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId() });
    const waiting = client.wait(state);
    expect(await decide(state.id, { approve: true })).toBe(303);
    expect((await waiting).status).toBe('approved');
    expect(paths.filter((path) => path.endsWith('/wait')).length).toBeGreaterThan(0);
  });

  it('uses the runtime\'s own WebSocket where it has one', async () => {
    const runId = newRunId();
    const env = { ...process.env, COUNTERSIGN_URL: server.url, COUNTERSIGN_TOKEN: server.token, RUN_ID: runId };
    const script = resolve(import.meta.dirname, 'fixtures', 'wait.mjs');
    const waiting = promisify(execFile)(
      process.execPath,
      ['--experimental-websocket', '--no-warnings', script, JSON.stringify(BIG_PAYMENT)],
      { env },
    );
    await decide((await pendingCall(runId)).id, { approve: true });
    const lines = (await waiting).stdout.trim().split('\n');
    expect(JSON.parse(lines.at(-1) ?? '')).toEqual({ status: 'approved', polls: 0, webSocket: 'function' });
  });

  it('gets the decision over the long-poll behind a proxy that refuses WebSockets', async () => {
    const target = new URL(server.url);
    const proxy = createServer((request, response) => {
      const forwarded = httpRequest(
        { host: target.hostname, port: target.port, path: request.url, method: request.method, headers: request.headers },
        (answer) => {
          response.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(response);
        },
      );
      request.pipe(forwarded);
    });
    proxy.on('upgrade', (_request, socket) => socket.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n'));
    await new Promise<void>((done) => proxy.listen(0, '127.0.0.1', done));
    try {
      const address = proxy.address() as AddressInfo;
      const { fetch, paths } = recordingFetch();
      const client = clientFor({ url: `http://127.0.0.1:${address.port}`, fetch });
      const state = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId() });
      const waiting = client.wait(state);
      await decide(state.id, { approve: true });
      expect((await waiting).status).toBe('approved');
      expect(paths.filter((path) => path.endsWith('/wait')).length).toBeGreaterThan(0);
    } finally {
      proxy.closeAllConnections();
      await new Promise((done) => proxy.close(done));
    }
  });

  it('returns an expired call as expired when nobody decides in time', async () => {
    const client = clientFor();
    const state = await client.submit({ tool: 'book', arguments: BOOKING, runId: newRunId() });
    expect(state.status).toBe('pending');
    const final = await client.wait(state);
    expect(final.status).toBe('expired');
  });

  it('cancels the call at its deadline, so that nobody can approve it after', async () => {
    const client = clientFor();
    const state = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId() });
    const error = await client.wait(state, { timeoutMs: 1000 }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(TimedOut);
    expect((error as TimedOut).cancelled).toBe(true);
    expect((error as TimedOut).status).toBe('cancelled');
    expect((await callState(state.id)).status).toBe('cancelled');
  });

  it('leaves the call pending at its deadline when asked not to cancel', async () => {
    const client = clientFor({ webSocket: false });
    const state = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId() });
    const error = await client.wait(state, { timeoutMs: 1000, cancel: false }).catch((caught: unknown) => caught);
    expect((error as TimedOut).cancelled).toBe(false);
    expect((await callState(state.id)).status).toBe('pending');
    await client.cancel(state);
  });

  it('cancels the call when the caller aborts', async () => {
    const client = clientFor();
    const state = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId() });
    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error('the user left')), 300);
    await expect(client.wait(state, { signal: abort.signal })).rejects.toThrow('the user left');
    expect((await callState(state.id)).status).toBe('cancelled');
  });
});

describe('gated', () => {
  it('runs the function for an allowed call', async () => {
    const pay = clientFor().gated('pay', async (args: { amount: string; payee: string }) => `paid ${args.amount}`);
    expect(await pay(SMALL_PAYMENT)).toBe('paid 12.50');
  });

  it('runs the function with the approver\'s edited arguments', async () => {
    const runId = newRunId();
    const ran: unknown[] = [];
    const pay = clientFor().gated('pay', (args: { amount: string; payee: string }) => ran.push(args), { runId });
    const paying = pay(BIG_PAYMENT);
    const held = await pendingCall(runId);
    const edited = '{"amount": "450.00", "payee": "bob"}';
    expect(await decide(held.id, { approve: true, edited })).toBe(303);
    await paying;
    expect(ran).toEqual([{ amount: '450.00', payee: 'bob' }]);
  });

  it('throws NotApproved with the comment on a denial, and never runs the function', async () => {
    const runId = newRunId();
    const ran: unknown[] = [];
    const pay = clientFor().gated('pay', (args: object) => ran.push(args), {
      runId,
      context: 'Paying the November invoice',
    });
    const paying = pay(BIG_PAYMENT).catch((caught: unknown) => caught);
    const held = await pendingCall(runId);
    await decide(held.id, { approve: false, comment: 'Not this month.' });
    const error = await paying;
    expect(error).toBeInstanceOf(NotApproved);
    expect((error as NotApproved).status).toBe('denied');
    expect((error as NotApproved).comment).toBe('Not this month.');
    expect((error as NotApproved).reason).toBe('Not this month.');
    expect((error as Error).message).toContain('Not this month.');
    expect(ran).toEqual([]);
  });

  it('throws NotApproved with the policy\'s reason on a refusal', async () => {
    const wire = clientFor().gated('wire', () => 'sent');
    const error = await wire(BIG_WIRE).catch((caught: unknown) => caught);
    expect((error as NotApproved).status).toBe('refused');
    expect((error as NotApproved).reason).toContain('USD 100.00');
  });

  it('throws NotApproved when nobody decides before the call expires', async () => {
    const book = clientFor().gated('book', () => 'booked');
    const error = await book(BOOKING).catch((caught: unknown) => caught);
    expect((error as NotApproved).status).toBe('expired');
  });

  it('throws TimedOut at its deadline and cancels the call', async () => {
    const runId = newRunId();
    const pay = clientFor().gated('pay', () => 'paid', { runId, deadlineMs: 1000 });
    const error = await pay(BIG_PAYMENT).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(TimedOut);
    expect((await callState((error as TimedOut).callId)).status).toBe('cancelled');
  });

  it('refuses an edit that the function\'s own check refuses', async () => {
    const runId = newRunId();
    const ran: unknown[] = [];
    const pay = clientFor().gated('pay', (args: { amount: string }) => ran.push(args), {
      runId,
      parseEdit: (edited) => {
        if (typeof edited.amount !== 'string') {
          throw new TypeError('amount must be a string');
        }
        return { amount: edited.amount };
      },
    });
    const paying = pay(BIG_PAYMENT).catch((caught: unknown) => caught);
    const held = await pendingCall(runId);
    await decide(held.id, { approve: true, edited: '{"amount": 450}' });
    expect(await paying).toBeInstanceOf(TypeError);
    expect(ran).toEqual([]);
  });
});


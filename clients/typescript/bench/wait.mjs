/**
 * The waiting side of bench/ts_decision_bench.py: many agents in this one process, each in
 * `client.wait`, half on the WebSocket (the `ws` package, as on Node 20) and half on the
 * long-poll (`webSocket: false`). It imports the built package (`dist/`, `npm run build`).
 *
 * Input, one JSON object on stdin: {"url", "token", "websocket": [ids], "long_poll": [ids]}.
 * Output, one JSON object a line on stdout:
 *   {"clock_ns"}                   at start: the bench checks that both sides read one clock;
 *   {"ready": true}                once every wait is connected (a socket has the call's current
 *                                  state, a long-poll has been sent);
 *   {"call", "status", "resolved_ns"}  each wait as it resolves;
 *   {"done": true, "socket_opens", "long_polls"}  when every wait has resolved.
 * Times are `process.hrtime.bigint()`: CLOCK_MONOTONIC on Linux, as Python's `perf_counter`.
 * Any failure prints to stderr and exits 1.
 */
import { WebSocket } from 'ws';

import { Client } from '../dist/index.js';

const CALL_IN_URL = /\/calls\/([^/?]+)(?:\/wait)?(?:\?|$)/;

function say(message) {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

function callOf(url) {
  const found = CALL_IN_URL.exec(String(url));
  if (found === null) {
    throw new Error(`no call id in ${url}`);
  }
  return decodeURIComponent(found[1]);
}

async function readInput() {
  const chunks = [];
  for await (const chunk of process.stdin) {
    chunks.push(chunk);
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function main() {
  say({ clock_ns: String(process.hrtime.bigint()) });
  const input = await readInput();
  const waiting = new Set([...input.websocket, ...input.long_poll]);
  const connected = new Set();
  let socketOpens = 0;
  let longPolls = 0;
  let readySaid = false;
  const connect = (call) => {
    connected.add(call);
    if (!readySaid && connected.size === waiting.size) {
      readySaid = true;
      say({ ready: true });
    }
  };

  // The client's own wait, watched from outside: a socket counts as connected at its first
  // message (the call's current state), a long-poll once its request is on its way.
  class WatchedSocket extends WebSocket {
    constructor(url, options) {
      super(url, options);
      socketOpens += 1;
      const call = callOf(url);
      this.addEventListener('message', () => connect(call), { once: true });
    }
  }
  const watchedFetch = (url, init) => {
    longPolls += 1;
    connect(callOf(url));
    return fetch(url, init);
  };

  const common = { url: input.url, token: input.token };
  const sockets = new Client({ ...common, webSocket: WatchedSocket });
  const polls = new Client({ ...common, webSocket: false, fetch: watchedFetch });
  const wait = async (client, call) => {
    const state = await client.wait(call);
    const resolved = process.hrtime.bigint();
    say({ call, status: state.status, resolved_ns: String(resolved) });
  };
  await Promise.all([
    ...input.websocket.map((call) => wait(sockets, call)),
    ...input.long_poll.map((call) => wait(polls, call)),
  ]);
  say({ done: true, socket_opens: socketOpens, long_polls: longPolls });
}

main().catch((error) => {
  process.stderr.write(`wait.mjs: ${error?.stack ?? error}\n`);
  process.exit(1);
});

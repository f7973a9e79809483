/**
 * A server restart while an agent waits: a second server process on the shared database goes
 * down, a person decides meanwhile (through the other server), and it comes back on the same
 * port. The waiting client reconnects and gets the decision made while it was away.
 */
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { Client } from '../src/index.js';
import { freePort, startServer } from './server.js';
import { BIG_PAYMENT, decide, newRunId, server } from './world.js';

describe('a server restart while waiting', () => {
  it.each([
    ['the WebSocket', undefined],
    ['the long-poll', false as const],
  ])('loses no decision over %s', async (_way, webSocket) => {
    const port = await freePort();
    const log = join(server.folder, `restarted-${port}.log`);
    let restarting = await startServer(server.databaseUrl, port, log);
    try {
      const client = new Client({
        url: restarting.url,
        token: server.token,
        ...(webSocket === false && { webSocket }),
      });
      const state = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId: newRunId() });
      const waiting = client.wait(state, { timeoutMs: 45_000 });
      await new Promise((done) => setTimeout(done, 300)); // connected, and waiting
      await restarting.stop();
      expect(await decide(state.id, { approve: true, comment: 'decided while it was down' })).toBe(303);
      restarting = await startServer(server.databaseUrl, port, log);
      const final = await waiting;
      expect(final.status).toBe('approved');
      expect(final.decision?.comment).toBe('decided while it was down');
    } finally {
      await restarting.stop();
    }
  });
});

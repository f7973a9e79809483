/**
 * `requireReceipt` in a real MCP server (the MCP TypeScript SDK's `McpServer`, reached by its
 * own `Client` over its in-memory transport): the tool runs only with a receipt for its name
 * and arguments in the request's `_meta`.
 */
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';

import { RECEIPT_META_KEY, ReplayGuard } from '../src/index.js';
import { requireReceipt } from '../src/mcp.js';
import { type Keys, claims, makeKeys, sign } from './signer.js';

const PAYMENT = '{"amount": "12.50", "payee": "bob"}';

let keys: Keys;

beforeAll(async () => {
  keys = await makeKeys();
});

/** A bank server whose `pay` tool demands a receipt; `paid` lists the payments it made. */
async function bank(): Promise<{ mcp: McpClient; paid: string[] }> {
  const paid: string[] = [];
  const server = new McpServer({ name: 'bank', version: '1.0.0' });
  server.registerTool(
    'pay',
    { inputSchema: { amount: z.string(), payee: z.string() } },
    requireReceipt(
      ({ amount, payee }) => {
        paid.push(`${amount} to ${payee}`);
        return { content: [{ type: 'text' as const, text: 'paid' }] };
      },
      { tool: 'pay', jwks: keys.jwks, replayGuard: new ReplayGuard() },
    ),
  );
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const mcp = new McpClient({ name: 'gateway', version: '1.0.0' });
  await mcp.connect(clientSide);
  return { mcp, paid };
}

function receiptFor(tool: string, text: string): Promise<string> {
  return sign(claims({ tool, arguments: text }), keys.signingKey, keys.kid);
}

function textOf(result: Awaited<ReturnType<McpClient['callTool']>>): string {
  const [first] = result.content as { text: string }[];
  return first?.text ?? '';
}

describe('requireReceipt', () => {
  it('runs the tool with a receipt for its name and arguments, once', async () => {
    const { mcp, paid } = await bank();
    const receipt = await receiptFor('pay', PAYMENT);
    const call = {
      name: 'pay',
      arguments: { amount: '12.50', payee: 'bob' },
      _meta: { [RECEIPT_META_KEY]: receipt },
    };
    const first = await mcp.callTool(call);
    expect(first.isError).toBeFalsy();
    expect(paid).toEqual(['12.50 to bob']);
    const again = await mcp.callTool(call);
    expect(again.isError).toBe(true);
    expect(textOf(again)).toContain('used already');
    expect(paid).toEqual(['12.50 to bob']);
  });

  it('refuses a call without a receipt, with changed arguments, or for another tool', async () => {
    const { mcp, paid } = await bank();
    const none = await mcp.callTool({ name: 'pay', arguments: { amount: '12.50', payee: 'bob' } });
    expect(none.isError).toBe(true);
    expect(textOf(none)).toContain('has none');

    const receipt = await receiptFor('pay', PAYMENT);
    const changed = await mcp.callTool({
      name: 'pay',
      arguments: { amount: '1250.00', payee: 'bob' },
      _meta: { [RECEIPT_META_KEY]: receipt },
    });
    expect(changed.isError).toBe(true);
    expect(textOf(changed)).toContain('other arguments');

    const elsewhere = await receiptFor('refund', PAYMENT);
    const wrongTool = await mcp.callTool({
      name: 'pay',
      arguments: { amount: '12.50', payee: 'bob' },
      _meta: { [RECEIPT_META_KEY]: elsewhere },
    });
    expect(wrongTool.isError).toBe(true);
    expect(textOf(wrongTool)).toContain('another tool');
    expect(paid).toEqual([]);
  });
});

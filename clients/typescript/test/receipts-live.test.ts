/**
 * The receipts the live server issues, verified with `verifyReceipt` against the JWKS it
 * publishes: an allowed call's, and an approved call's that names the approver's edit.
 */
import { describe, expect, it } from 'vitest';

import { ReceiptWrongArguments, ReceiptWrongTool, verifyReceipt } from '../src/index.js';
import {
  Approver,
  BIG_PAYMENT,
  SMALL_PAYMENT,
  clientFor,
  newRunId,
  server,
} from './world.js';

describe('receipts from the server', () => {
  it('an allowed call carries one that verifies for its tool and arguments', async () => {
    const client = clientFor();
    const text = JSON.stringify(SMALL_PAYMENT);
    const state = await client.submit({ tool: 'pay', arguments: text, runId: newRunId() });
    expect(state.status).toBe('allowed');
    expect(state.receipt).toEqual(expect.any(String));
    const receipt = state.receipt ?? '';
    const claims = await verifyReceipt(receipt, { tool: 'pay', arguments: text, issuer: server.url });
    expect(claims).toMatchObject({ sub: state.id, status: 'allowed', approvals: [], edited: false });
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: { ...SMALL_PAYMENT, amount: '13.50' }, issuer: server.url }),
    ).rejects.toBeInstanceOf(ReceiptWrongArguments);
    await expect(
      verifyReceipt(receipt, { tool: 'refund', arguments: text, issuer: server.url }),
    ).rejects.toBeInstanceOf(ReceiptWrongTool);
  });

  it("an approved call's names the edited arguments; denied calls carry none", async () => {
    const client = clientFor();
    const runId = newRunId();
    const held = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId });
    expect(held.receipt).toBeNull();
    const edited = JSON.stringify({ ...BIG_PAYMENT, amount: '550.00' });
    const approver = await Approver.login();
    expect(await approver.decide(held.id, { approve: true, edited })).toBe(303);
    const final = await client.wait(held, { timeoutMs: 30_000 });
    expect(final.status).toBe('approved');
    const claims = await verifyReceipt(final.receipt ?? '', {
      tool: 'pay',
      arguments: JSON.parse(edited) as object,
      issuer: server.url,
    });
    expect(claims).toMatchObject({ edited: true, arguments: edited, status: 'approved' });
    await expect(
      verifyReceipt(final.receipt ?? '', { tool: 'pay', arguments: BIG_PAYMENT, issuer: server.url }),
    ).rejects.toBeInstanceOf(ReceiptWrongArguments);

    const denied = await client.submit({ tool: 'pay', arguments: BIG_PAYMENT, runId });
    expect(await approver.decide(denied.id, { approve: false, comment: 'no' })).toBe(303);
    expect((await client.wait(denied, { timeoutMs: 30_000 })).receipt).toBeNull();
  });
});

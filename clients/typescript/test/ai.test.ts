/**
 * `countersign-client/ai` with the AI SDK's own mock model (`ai/test`): the model asks for a
 * payment, Countersign decides (a person at the web form when it is held), and the real
 * `execute` runs only on go.
 */
import { generateText, isStepCount, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';

import { countersignApproval, gateTools } from '../src/ai.js';
import { BIG_PAYMENT, SMALL_PAYMENT, clientFor, decide, newRunId, pendingCall } from './world.js';

const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

/** A model that asks for one payment, then answers; its prompts are kept. */
function payingModel(payment: object): { model: MockLanguageModelV4; prompts: unknown[] } {
  const prompts: unknown[] = [];
  const model = new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      prompts.push(prompt);
      if (prompts.length === 1) {
        return {
          content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: 'pay', input: JSON.stringify(payment) }],
          finishReason: { unified: 'tool-calls', raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      }
      return {
        content: [{ type: 'text', text: 'Done.' }],
        finishReason: { unified: 'stop', raw: undefined },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, prompts };
}

function payTool(ran: unknown[]) {
  return tool({
    description: 'Pay an amount to a payee.',
    inputSchema: z.object({ amount: z.string(), payee: z.string() }),
    execute: async (payment) => {
      ran.push(payment);
      return `paid ${payment.amount} to ${payment.payee}`;
    },
  });
}

/** What the model was given as the tool's output in its second turn. */
function toolOutput(prompts: unknown[]): unknown {
  const last = prompts[1] as { role: string; content: { type: string; output?: unknown }[] }[];
  const message = last.find((entry) => entry.role === 'tool');
  return message?.content.find((part) => part.type === 'tool-result')?.output;
}

describe('gateTools', () => {
  it('runs an allowed call', async () => {
    const ran: unknown[] = [];
    const { model, prompts } = payingModel(SMALL_PAYMENT);
    await generateText({
      model,
      prompt: 'Pay bob.',
      tools: gateTools(clientFor(), { pay: payTool(ran) }),
      stopWhen: isStepCount(3),
    });
    expect(ran).toEqual([SMALL_PAYMENT]);
    expect(toolOutput(prompts)).toEqual({ type: 'text', value: 'paid 12.50 to bob' });
  });

  it('never runs a denied call, and tells the model why', async () => {
    const ran: unknown[] = [];
    const runId = newRunId();
    const { model, prompts } = payingModel(BIG_PAYMENT);
    const running = generateText({
      model,
      prompt: 'Pay bob.',
      tools: gateTools(clientFor(), { pay: payTool(ran) }, { runId }),
      stopWhen: isStepCount(3),
    });
    const held = await pendingCall(runId);
    expect(await decide(held.id, { approve: false, comment: 'Bob was paid last week.' })).toBe(303);
    await running;
    expect(ran).toEqual([]);
    expect(toolOutput(prompts)).toEqual({
      type: 'json',
      value: { not_approved: true, status: 'denied', reason: 'Bob was paid last week.' },
    });
  });

  it('hands the reason to the model past a tool\'s own toModelOutput', async () => {
    const ran: unknown[] = [];
    const runId = newRunId();
    const { model, prompts } = payingModel(BIG_PAYMENT);
    const pay = tool({
      ...payTool(ran),
      toModelOutput: ({ output }: { output: string }) => ({ type: 'text' as const, value: output.toUpperCase() }),
    });
    const running = generateText({
      model,
      prompt: 'Pay bob.',
      tools: gateTools(clientFor(), { pay }, { runId }),
      stopWhen: isStepCount(3),
    });
    await decide((await pendingCall(runId)).id, { approve: false, comment: 'No.' });
    await running;
    expect(ran).toEqual([]);
    expect(toolOutput(prompts)).toEqual({
      type: 'json',
      value: { not_approved: true, status: 'denied', reason: 'No.' },
    });
  });

  it('runs an approved call with the approver\'s edited arguments', async () => {
    const ran: unknown[] = [];
    const runId = newRunId();
    const { model } = payingModel(BIG_PAYMENT);
    const running = generateText({
      model,
      prompt: 'Pay bob.',
      tools: gateTools(clientFor(), { pay: payTool(ran) }, { runId }),
      stopWhen: isStepCount(3),
    });
    const held = await pendingCall(runId);
    await decide(held.id, { approve: true, edited: '{"amount": "450.00", "payee": "bob"}' });
    await running;
    expect(ran).toEqual([{ amount: '450.00', payee: 'bob' }]);
  });

  it('does not run an edit its input schema refuses', async () => {
    const ran: unknown[] = [];
    const runId = newRunId();
    const { model, prompts } = payingModel(BIG_PAYMENT);
    const running = generateText({
      model,
      prompt: 'Pay bob.',
      tools: gateTools(clientFor(), { pay: payTool(ran) }, { runId }),
      stopWhen: isStepCount(3),
    });
    const held = await pendingCall(runId);
    await decide(held.id, { approve: true, edited: '{"amount": 450}' });
    await running;
    expect(ran).toEqual([]);
    expect(toolOutput(prompts)).toMatchObject({ type: 'json', value: { not_approved: true, status: 'approved' } });
  });
});

describe('countersignApproval', () => {
  it('is the SDK\'s own denial, with the comment, and the tool never runs', async () => {
    const ran: unknown[] = [];
    const runId = newRunId();
    const { model } = payingModel(BIG_PAYMENT);
    const running = generateText({
      model,
      prompt: 'Pay bob.',
      tools: { pay: payTool(ran) },
      toolApproval: countersignApproval(clientFor(), { runId }),
      stopWhen: isStepCount(3),
    });
    const held = await pendingCall(runId);
    await decide(held.id, { approve: false, comment: 'Not this month.' });
    const result = await running;
    expect(ran).toEqual([]);
    const response = result.steps[0]?.content.find((part) => part.type === 'tool-approval-response');
    expect(response).toMatchObject({ approved: false, reason: 'Not this month.' });
  });

  it('is the SDK\'s own approval for an approved call, which then runs', async () => {
    const ran: unknown[] = [];
    const runId = newRunId();
    const { model } = payingModel(BIG_PAYMENT);
    const running = generateText({
      model,
      prompt: 'Pay bob.',
      tools: { pay: payTool(ran) },
      toolApproval: countersignApproval(clientFor(), { runId }),
      stopWhen: isStepCount(3),
    });
    const held = await pendingCall(runId);
    await decide(held.id, { approve: true, comment: 'ok' });
    const result = await running;
    expect(ran).toEqual([BIG_PAYMENT]);
    const response = result.steps[0]?.content.find((part) => part.type === 'tool-approval-response');
    expect(response).toMatchObject({ approved: true, reason: 'ok' });
  });

  it('leaves the tools it is not given to the SDK', async () => {
    const ran: unknown[] = [];
    const { model } = payingModel(BIG_PAYMENT);
    await generateText({
      model,
      prompt: 'Pay bob.',
      tools: { pay: payTool(ran) },
      toolApproval: countersignApproval(clientFor(), { tools: ['wire'] }),
      stopWhen: isStepCount(3),
    });
    expect(ran).toEqual([BIG_PAYMENT]);
  });
});

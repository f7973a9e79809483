// A real OpenID provider (oidc-provider) for the single sign-on tests, on 127.0.0.1:PORT.
//
// One client (client_secret_basic, PKCE required, the test's redirect URI). The accounts and
// their claims are read from the JSON file ACCOUNTS at each use ({"<sub>": {claims…}}), so a
// test changes someone's groups by rewriting it. There is no login form: the interaction
// signs in the account the authorization request names in login_hint, and consent is granted
// for the scopes the client asks, so a test drives the flow by following redirects.
//
// Environment: PORT, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI, ACCOUNTS.

import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const { PORT, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI, ACCOUNTS } = process.env;
for (const [name, value] of Object.entries({ PORT, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI, ACCOUNTS })) {
  if (!value) {
    console.error(`${name} is not set`);
    process.exit(2);
  }
}

const SCOPES = ['openid', 'email', 'profile', 'groups'];

function accounts() {
  return JSON.parse(readFileSync(ACCOUNTS, 'utf8'));
}

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key', use: 'sig', alg: 'RS256' };

const provider = new Provider(`http://127.0.0.1:${PORT}`, {
  clients: [
    {
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: [REDIRECT_URI],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys: [signingKey] },
  cookies: { keys: ['a key for the tests alone'] },
  scopes: SCOPES,
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
  },
  pkce: { methods: ['S256'], required: () => true },
  features: { devInteractions: { enabled: false } },
  async findAccount(ctx, sub) {
    const claims = accounts()[sub];
    if (!claims) {
      return undefined;
    }
    return { accountId: sub, claims: async () => ({ ...claims, sub }) };
  },
  // Every scope the client asks for is granted, as for a first-party application.
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope(SCOPES.join(' '));
    await grant.save();
    return grant;
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
});

provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/[^/]+$/);
  if (!match) {
    await next();
    return;
  }
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const accountId = details.params.login_hint;
  if (!accountId || !accounts()[accountId]) {
    ctx.status = 400;
    ctx.body = 'the authorization request names no known account in login_hint';
    return;
  }
  ctx.respond = false;
  await provider.interactionFinished(ctx.req, ctx.res, { login: { accountId } }, {
    mergeWithLastSubmission: false,
  });
});

provider.listen(Number(PORT), '127.0.0.1', () => {
  console.log(`listening on ${PORT}`);
});

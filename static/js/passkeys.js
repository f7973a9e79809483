// Passkeys in the browser: the page's three ceremonies, each two POSTs around the
// authenticator. The server's options (py_webauthn's JSON) are read with the browser's own
// PublicKeyCredential.parse…OptionsFromJSON, and the answer is sent back as its toJSON()
// (base64url). Nothing here checks anything: the server verifies every answer.
//
// - form[data-passkey-register] (/account/): Add a passkey.
// - form[data-passkey-sign-in] (the login page): Sign in with a passkey.
// - form.decision[data-passkey] (a call at a passkey gate): Approve and Deny first ask the
//   authenticator for an assertion of that decision, then post it with the form.
(function () {
  "use strict";

  var FAILED = "The passkey did not complete. Try again.";
  var UNSUPPORTED = "This browser cannot use passkeys.";

  function supported() {
    return !!(window.PublicKeyCredential && PublicKeyCredential.parseRequestOptionsFromJSON);
  }

  function csrf(form) {
    var input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  // POST form fields; the answer's JSON, or an Error carrying the server's reason.
  function post(url, form, fields) {
    var body = new URLSearchParams(fields);
    body.set("csrfmiddlewaretoken", csrf(form));
    return fetch(url, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrf(form) },
    }).then(function (response) {
      if (response.ok) return response.json();
      return response.text().then(function (text) {
        // 403: refused, and why; 429: the login throttle's lockout.
        var said = response.status === 403 || response.status === 429;
        throw new Error(said && text.length < 300 ? text : FAILED);
      });
    });
  }

  function say(form, text) {
    var where = form.querySelector(".passkey-error") || document.getElementById("notice");
    if (!where) return;
    where.textContent = text;
    where.hidden = false;
  }

  function reason(error) {
    // A cancelled or timed-out ceremony is the browser's NotAllowedError.
    return error && error.name === "Error" && error.message ? error.message : FAILED;
  }

  function field(form, name) {
    var input = form.querySelector("input[name='" + name + "']");
    if (!input) {
      input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      form.appendChild(input);
    }
    return input;
  }

  function register(form) {
    post(form.dataset.passkeyRegister, form, {})
      .then(function (options) {
        return navigator.credentials.create({
          publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options),
        });
      })
      .then(function (credential) {
        var name = form.querySelector("input[name=name]");
        return post(form.action, form, {
          name: name ? name.value : "",
          credential: JSON.stringify(credential.toJSON()),
        });
      })
      .then(function (answer) {
        window.location.assign(answer.next);
      })
      .catch(function (error) {
        say(form, reason(error));
      });
  }

  function signIn(form) {
    post(form.dataset.passkeySignIn, form, {})
      .then(function (options) {
        return navigator.credentials.get({
          publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options),
        });
      })
      .then(function (credential) {
        var next = form.querySelector("input[name=next]");
        return post(form.action, form, {
          next: next ? next.value : "/",
          credential: JSON.stringify(credential.toJSON()),
        });
      })
      .then(function (answer) {
        window.location.assign(answer.next);
      })
      .catch(function (error) {
        say(form, reason(error));
      });
  }

  // A decision at a passkey gate: the assertion for this call, its digest and the verb of
  // the button pressed, then the button pressed again with it in the form.
  function stepUp(form, button) {
    var verb = button.value === "deny" ? "deny" : "approve";
    var digest = form.querySelector("input[name=arguments_sha256]");
    var nonce = "";
    post(form.dataset.passkey + verb, form, { arguments_sha256: digest ? digest.value : "" })
      .then(function (answer) {
        nonce = answer.nonce;
        return navigator.credentials.get({
          publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(answer.options),
        });
      })
      .then(function (credential) {
        field(form, "passkey_nonce").value = nonce;
        field(form, "passkey_credential").value = JSON.stringify(credential.toJSON());
        form.dataset.passkeyReady = verb;
        button.click();
      })
      .catch(function (error) {
        say(form, reason(error));
      });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    if (!form.dataset.passkeyRegister && !form.dataset.passkeySignIn) return;
    event.preventDefault();
    if (!supported()) {
      say(form, UNSUPPORTED);
      return;
    }
    if (form.dataset.passkeyRegister) register(form);
    else signIn(form);
  });

  // Capture: before htmx or the browser submit the decision form.
  document.addEventListener(
    "click",
    function (event) {
      var button = event.target instanceof Element ? event.target.closest("button") : null;
      var form = button ? button.form : null;
      if (!form || !form.dataset.passkey || button.name !== "decision") return;
      var verb = button.value === "deny" ? "deny" : "approve";
      if (form.dataset.passkeyReady === verb) {
        delete form.dataset.passkeyReady; // used by this submission only
        return;
      }
      event.preventDefault();
      event.stopImmediatePropagation();
      if (!supported()) {
        say(form, UNSUPPORTED);
        return;
      }
      stepUp(form, button);
    },
    true,
  );
})();

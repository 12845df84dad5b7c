// The dashboard in headless Chromium (issue 38), run by tests/ui.rs with
// the server's address, the key and the runs it seeded in the environment.
// Every wait is on the page's state (Playwright's waits), never a sleep.
// Exits non-zero, saying which step failed, when anything is not as
// expected; tests/ui.rs then checks the store through the API.
import { createRequire } from "node:module";
import path from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const require = createRequire(path.join(env("PLAYWRIGHT_MODULES"), "noop.js"));
const { chromium } = require("playwright-core");

const BASE = env("BASE");
const SHOTS = env("SHOTS");
const [FINISHED, CLICK, CLICK_INTENT, KEYS, KEYS_INTENT, FORGED, FORGED_INTENT, HANDOFF, HANDOFF_INTENT] = [
  "FINISHED", "CLICK", "CLICK_INTENT", "KEYS", "KEYS_INTENT", "FORGED", "FORGED_INTENT", "HANDOFF", "HANDOFF_INTENT",
].map(env);
// A run's end after a decision waits for the queue worker: generous.
const RUN_END = 90_000;

let step = "start";
const check = (ok, what) => {
  if (!ok) throw new Error(`${step}: ${what}`);
};
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  context.setDefaultTimeout(30_000);
  const page = await context.newPage();
  const errors = [];
  // A CSP violation (an inline script or style, a foreign host) is a
  // console error; the refusals this script provokes are too, so only
  // those are counted.
  context.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/.test(m.text())) errors.push(m.text());
  });

  step = "sign-in";
  await page.goto(`${BASE}/ui/runs`);
  await page.waitForURL(/\/ui\/login\?next=/);
  await shot(page, "sign-in");
  await page.getByLabel("API key").fill("not-a-key");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("#sign-in-error").waitFor();
  await page.getByLabel("API key").fill(env("KEY"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${BASE}/ui/runs`);
  const who = await page.locator(".who").innerText();
  check(who.includes(env("KEY_NAME")), `signed in as the key's name, not ${who}`);
  const cookies = await context.cookies(`${BASE}/ui/runs`);
  const session = cookies.find((c) => c.name === "rein_session");
  check(session && session.httpOnly && session.sameSite === "Strict" && session.path === "/ui",
    `an HttpOnly SameSite=Strict cookie on /ui, not ${JSON.stringify(session)}`);
  check(!session.value.includes(env("KEY")), "the cookie does not hold the key");

  step = "runs page";
  const finishedRow = page.locator(`tr[data-run="${FINISHED}"]`);
  await finishedRow.waitFor();
  check((await finishedRow.innerText()).includes("succeeded"), "the finished run is listed as succeeded");
  check((await finishedRow.locator("td.n").first().innerText()).match(/\d+(\.\d+)? (ms|s|min|h)/),
    "its duration has a unit");
  await shot(page, "runs");
  await page.getByLabel("Status").selectOption("awaiting_approval");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.waitForURL(/status=awaiting_approval/);
  check(await page.locator(`tr[data-run="${FINISHED}"]`).count() === 0, "the status filter hides the finished run");
  check(await page.locator(`tr[data-run="${FORGED}"]`).count() === 1, "and lists a waiting one");
  await page.getByLabel("Run id").fill(FINISHED);
  await page.getByRole("button", { name: "Open run" }).click();
  await page.waitForURL(`${BASE}/ui/runs/${FINISHED}`);

  step = "finished run page";
  await page.locator("#ledger tbody tr").first().waitFor();
  const ledger = await page.locator("#ledger").innerText();
  check(ledger.includes("send_email") && ledger.includes("update_delivery_time"), `the ledger lists the calls: ${ledger}`);
  check(await page.locator("#report-h").count() === 1, "the report is shown");
  check(await page.locator('#timeline li[data-kind="run_finished"]').count() === 1, "the timeline ends with run_finished");
  const time = page.locator("#timeline time").first();
  check((await time.getAttribute("title")).endsWith("(UTC)"), "a time shows UTC on hover (the script ran)");
  await shot(page, "run-finished");

  step = "approve by click";
  await page.goto(`${BASE}/ui/runs/${CLICK}`);
  const card = page.locator(`article.approval[data-intent="${CLICK_INTENT}"]`);
  await card.waitFor();
  await shot(page, "run-waiting");
  await card.getByRole("button", { name: /Approve/ }).click();
  await page.waitForURL(`${BASE}/ui/runs/${CLICK}`);
  await card.waitFor({ state: "detached" });

  step = "live timeline";
  // A second tab on a waiting run: its end can only arrive live.
  const live = await context.newPage();
  await live.goto(`${BASE}/ui/runs/${KEYS}`);
  await live.locator("#timeline[data-live]").waitFor();
  check(await live.locator('#timeline li[data-kind="run_finished"]').count() === 0, "not ended yet");
  const before = await live.locator("#timeline li").count();

  step = "approve by keyboard";
  await page.goto(`${BASE}/ui/approvals`);
  const target = page.locator(`article.approval[data-intent="${KEYS_INTENT}"] button.approve`);
  await target.waitFor();
  await shot(page, "approvals");
  let reached = false;
  for (let i = 0; i < 80 && !reached; i++) {
    await page.keyboard.press("Tab");
    reached = await target.evaluate((b) => b === document.activeElement);
  }
  check(reached, "Tab reaches the approve button");
  await page.keyboard.press("Enter");
  await page.waitForURL(`${BASE}/ui/approvals`);
  await page.locator(`article.approval[data-intent="${KEYS_INTENT}"]`).waitFor({ state: "detached" });

  step = "live timeline";
  await live.locator('#timeline li[data-kind="run_finished"]').waitFor({ timeout: RUN_END });
  check(await live.locator("#timeline li").count() > before, "new events appeared without a reload");
  await live.locator("#live-note a").waitFor();
  await shot(live, "run-live");
  await live.close();

  step = "a POST without the CSRF token";
  const decision = `${BASE}/ui/runs/${FORGED}/approvals/${FORGED_INTENT}`;
  const status = await page.evaluate(async (url) => {
    const r = await fetch(url, { method: "POST", body: new URLSearchParams({ decision: "approved" }) });
    return r.status;
  }, decision);
  check(status === 403, `refused with 403, not ${status}`);
  const wrong = await page.evaluate(async (url) => {
    const r = await fetch(url, { method: "POST", body: new URLSearchParams({ decision: "approved", csrf: "0".repeat(64) }) });
    return r.status;
  }, decision);
  check(wrong === 403, `a wrong token refused with 403, not ${wrong}`);

  step = "a form posted from another origin";
  await context.route("http://evil.test/**", (route) => route.fulfill({
    contentType: "text/html",
    body: `<!doctype html><form method="post" action="${decision}">
      <input name="decision" value="approved"><input name="csrf" value="guess"></form>
      <script>document.forms[0].submit()</script>`,
  }));
  const evil = await context.newPage();
  const [answer] = await Promise.all([
    evil.waitForResponse((r) => r.url() === decision),
    evil.goto("http://evil.test/"),
  ]);
  check(answer.status() === 403, `refused with 403, not ${answer.status()}`);
  await evil.close();

  step = "the forged run still waits";
  await page.goto(`${BASE}/ui/runs/${FORGED}`);
  await page.locator(`article.approval[data-intent="${FORGED_INTENT}"]`).waitFor();

  step = "handoffs page";
  await page.goto(`${BASE}/ui/handoffs`);
  await page.locator(`a[href="/ui/runs/${HANDOFF}#handoff-h"]`).waitFor();
  await shot(page, "handoffs");
  await page.getByRole("link", { name: "Decide on the run's page" }).click();
  await page.waitForURL(new RegExp(`/ui/runs/${HANDOFF}`));

  step = "handoff decision by click";
  const record = page.locator(`article.handoff[data-intent="${HANDOFF_INTENT}"]`);
  await record.waitFor();
  check(await page.locator("article.handoff").count() === 2, "two records await a decision");
  await shot(page, "run-handoff");
  await record.getByLabel(/Reason/).fill("restored by hand");
  await record.getByRole("button", { name: "Undone by hand" }).click();
  await page.waitForURL(`${BASE}/ui/runs/${HANDOFF}`);
  await record.waitFor({ state: "detached" });
  check(await page.locator("article.handoff").count() === 1, "one record still awaits");

  step = "empty states";
  await page.goto(`${BASE}/ui/runs?status=cancelled`);
  const empty = await page.locator("p.empty").innerText();
  check(empty.includes("No runs match these filters"), `the empty state says what to do: ${empty}`);
  await shot(page, "empty");

  step = "breakers page";
  await page.getByRole("link", { name: "Breakers" }).click();
  await page.waitForURL(`${BASE}/ui/breakers`);
  await page.locator("#arms-h").waitFor();
  // The mover's refused calls reached the desk's tool arms.
  check(await page.locator("#arms tbody tr").count() > 0, "this process's arms are listed");
  await shot(page, "breakers");

  step = "outcomes and spend page";
  await page.getByRole("link", { name: "Outcomes and spend" }).click();
  await page.waitForURL(`${BASE}/ui/stats`);
  const agentRow = (name) => page.locator(`#by-agent tr[data-name="${name}"]`);
  await agentRow("order_desk").waitFor();
  const cell = async (name, outcome) =>
    Number(await agentRow(name).locator(`td[data-outcome="${outcome}"]`).innerText());
  check(await cell("order_desk", "succeeded") >= 1, "the finished run counts as a success");
  check(await cell("mover", "handed_off") === 1, "the mover's run counts as handed off");
  check((await agentRow("order_desk").innerText()).includes("$"), "costs are in dollars");
  await page.getByLabel("Window", { exact: true }).selectOption("7d");
  await page.getByRole("button", { name: "Show" }).click();
  await page.waitForURL(/window=7d/);
  await agentRow("mover").waitFor();
  check(await page.locator("#series rect.ok").count() >= 1, "the chart has a bar of successes");
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= 1280, `the stats page fits 1280 px without scrolling sideways (${wide} px)`);
  await shot(page, "stats");

  step = "in flight and capacity, refreshed in place";
  await page.getByRole("link", { name: "In flight" }).click();
  await page.waitForURL(/\/ui\/live/);
  await page.locator("#refresh-note", { hasText: "Updated every" }).waitFor();
  await page.evaluate(() => { window.firstFigures = document.getElementById("live"); });
  // The script swaps in newer figures without a reload: a new node, on
  // the same document.
  await page.waitForFunction(
    () => document.getElementById("live") !== window.firstFigures && window.firstFigures !== undefined,
    null,
    { timeout: 20000 },
  );
  check(await page.locator("tr[data-row='workers'] meter").count() === 1, "the queue workers against their count");
  await shot(page, "live");

  step = "gateway";
  await page.getByRole("link", { name: "Gateway" }).click();
  await page.waitForURL(/\/ui\/gateway/);
  await page.getByRole("heading", { name: "Spend today by API key and model" }).waitFor();
  await shot(page, "gateway");

  step = "config";
  await page.getByRole("link", { name: "Config" }).click();
  await page.waitForURL(/\/ui\/config/);
  await page.locator("[data-agent='order_desk']").waitFor();
  check(!(await page.content()).includes(env("KEY")), "the key is never shown");
  await shot(page, "config");

  step = "security headers";
  const head = await page.request.get(`${BASE}/ui/runs`);
  const h = head.headers();
  check(h["content-security-policy"]?.startsWith("default-src 'self'"), `CSP: ${h["content-security-policy"]}`);
  check(h["x-frame-options"] === "DENY", "X-Frame-Options: DENY");

  step = "sign out";
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(/\/ui\/login/);
  await page.goto(`${BASE}/ui/runs`);
  await page.waitForURL(/\/ui\/login\?next=/);

  check(errors.length === 0, `no CSP violation: ${errors.join("; ")}`);
  console.log("dashboard: all steps passed");
} catch (e) {
  console.error(`dashboard: failed at ${step}: ${e.stack || e}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

// Package browsertest drives the console in a real browser: Chromium,
// headless, through the DevTools protocol (chromedp), against a real
// PostgreSQL with a real outbox driver. It is a module of its own so that
// chromedp stays out of baton's go.mod; it holds only its test.
//
// Chromium is looked for as chromium, chromium-browser, google-chrome or
// the path in BATON_CHROMIUM. Without one the test is skipped, or fails
// when CI is set. Its screenshots go to BATON_SCREENSHOT_DIR, or to
// baton-console-screenshots in the system's temporary directory.
package browsertest

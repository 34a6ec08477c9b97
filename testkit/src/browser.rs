//! Headless Chromium driven through ChromeDriver, for the tests of the
//! relay's operators' page.
//!
//! [`Browser::start`] runs `/usr/bin/chromedriver` (`OUTBOX_TEST_CHROMEDRIVER`
//! overrides it) on a free loopback port, in a process group of its own,
//! and opens a W3C WebDriver session with headless Chromium. The browser
//! and the driver are gone when the [`Browser`] is dropped, also when the
//! test fails. A missing Chromium or ChromeDriver fails the test naming
//! Debian's `chromium` and `chromium-driver` packages, which
//! `scripts/test.sh` installs.
//!
//! The WebDriver client is a small HTTP/1.1 JSON client of its own: one
//! connection per command, a `Content-Length` body, the answer read to the
//! end. Every wait has a deadline and fails with a message naming what it
//! waited for; the browser's console is collected so a test can fail on a
//! JavaScript error ([`Browser::assert_no_severe_logs`]).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// ChromeDriver's default path (Debian's `chromium-driver`);
/// `OUTBOX_TEST_CHROMEDRIVER` overrides it.
pub const DEFAULT_CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Chromium's default path (Debian's `chromium`); `OUTBOX_TEST_CHROMIUM`
/// overrides it.
pub const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// The browser's window and the page's viewport: what every screenshot
/// shows.
pub const WINDOW_SIZE: (u32, u32) = (1280, 900);

/// How to get both programs, in every "not found" failure.
const INSTALL_HINT: &str = "install Debian's `chromium` and `chromium-driver` packages \
     (`apt-get install chromium chromium-driver`; `scripts/test.sh` installs them when missing)";

/// The key of an element reference in W3C WebDriver.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long ChromeDriver may take to answer its status, and one command.
const DRIVER_START_LIMIT: Duration = Duration::from_secs(20);
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// An element of the page, found by a CSS selector.
#[derive(Debug, Clone)]
pub struct Element {
    id: String,
    selector: String,
}

impl Element {
    /// The selector it was found by.
    pub fn selector(&self) -> &str {
        &self.selector
    }

    fn reference(&self) -> Value {
        json!({ ELEMENT_KEY: self.id })
    }
}

/// One entry of the browser's console log.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// `SEVERE`, `WARNING`, `INFO`, `DEBUG`.
    pub level: String,
    /// Where it came from: `javascript`, `console-api`, `network`,
    /// `security`, ...
    pub source: String,
    /// Its text.
    pub message: String,
}

impl std::fmt::Display for LogEntry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "[{} {}] {}",
            self.level, self.source, self.message
        )
    }
}

/// An error WebDriver answered with: its `error` code and `message`.
#[derive(Debug, Clone)]
pub struct WebDriverError {
    /// The HTTP status.
    pub status: u16,
    /// The W3C error code, such as `no such element` or `no such alert`.
    pub error: String,
    /// Its message.
    pub message: String,
}

impl std::fmt::Display for WebDriverError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{} ({}): {}",
            self.error, self.status, self.message
        )
    }
}

/// Headless Chromium in a WebDriver session, and the ChromeDriver process
/// that runs it.
pub struct Browser {
    driver: Child,
    address: String,
    session: String,
    dir: PathBuf,
    /// Console entries read from the driver so far (each read drains the
    /// driver's buffer).
    console: Mutex<Vec<LogEntry>>,
}

impl Browser {
    /// Start ChromeDriver and open a headless Chromium session
    /// (`--headless=new --no-sandbox --disable-gpu --window-size=1280,900`,
    /// the whole browser console kept, dialogs left open until the test
    /// answers them).
    ///
    /// # Panics
    /// When Chromium or ChromeDriver is not installed (naming the Debian
    /// packages), or when the driver or the session does not start; the
    /// message holds the driver's log.
    pub async fn start() -> Browser {
        let driver_path = program(
            "OUTBOX_TEST_CHROMEDRIVER",
            DEFAULT_CHROMEDRIVER,
            "ChromeDriver",
        );
        let chromium = program("OUTBOX_TEST_CHROMIUM", DEFAULT_CHROMIUM, "Chromium");
        let dir =
            std::env::temp_dir().join(format!("outbox-browser-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|error| panic!("create {}: {error}", dir.display()));
        let port = free_port();
        let log_path = dir.join("chromedriver.log");
        let log = std::fs::File::create(&log_path)
            .unwrap_or_else(|error| panic!("create {}: {error}", log_path.display()));
        let errors = log
            .try_clone()
            .unwrap_or_else(|error| panic!("share {}: {error}", log_path.display()));
        let driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(errors)
            // A group of its own: dropping the browser kills the driver
            // and every Chromium process it started.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|error| {
                panic!("start {}: {error}; {INSTALL_HINT}", driver_path.display())
            });
        let mut browser = Browser {
            driver,
            address: format!("127.0.0.1:{port}"),
            session: String::new(),
            dir,
            console: Mutex::new(Vec::new()),
        };
        browser.wait_for_driver().await;
        browser.session = browser.open_session(&chromium).await;
        // The window holds the browser's own bars too: make the page's
        // viewport, and so every screenshot, exactly the window size.
        let (width, height) = WINDOW_SIZE;
        browser
            .must(
                "set the viewport",
                "POST",
                "/goog/cdp/execute",
                Some(json!({
                    "cmd": "Emulation.setDeviceMetricsOverride",
                    "params": {
                        "width": width,
                        "height": height,
                        "deviceScaleFactor": 1,
                        "mobile": false,
                    },
                })),
            )
            .await;
        browser
    }

    /// Poll ChromeDriver's `/status` until it is ready.
    async fn wait_for_driver(&mut self) {
        let deadline = Instant::now() + DRIVER_START_LIMIT;
        loop {
            if let Ok(Some(status)) = self.driver.try_wait() {
                panic!(
                    "ChromeDriver exited ({status}) before answering:\n{}",
                    self.driver_log()
                );
            }
            if let Ok((200, body)) = request(&self.address, "GET", "/status", None).await
                && body["value"]["ready"] == json!(true)
            {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "ChromeDriver did not answer on {} within {} s:\n{}",
                    self.address,
                    DRIVER_START_LIMIT.as_secs(),
                    self.driver_log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn open_session(&self, chromium: &Path) -> String {
        let (width, height) = WINDOW_SIZE;
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "unhandledPromptBehavior": "ignore",
                    "goog:chromeOptions": {
                        "binary": chromium.to_string_lossy(),
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-gpu",
                            format!("--window-size={width},{height}"),
                            "--disable-dev-shm-usage",
                            "--no-first-run",
                            "--no-default-browser-check",
                            "--disable-extensions",
                            "--hide-scrollbars",
                            "--disable-crash-reporter",
                            "--disable-breakpad",
                            format!("--user-data-dir={}", self.dir.join("profile").display()),
                        ],
                    },
                    "goog:loggingPrefs": { "browser": "ALL" },
                }
            }
        });
        match request(&self.address, "POST", "/session", Some(&capabilities)).await {
            Ok((200, body)) => match body["value"]["sessionId"].as_str() {
                Some(session) => session.to_owned(),
                None => panic!("ChromeDriver opened a session without an id: {body}"),
            },
            Ok((status, body)) => panic!(
                "ChromeDriver could not start Chromium ({status}): {}\n{}\n{INSTALL_HINT}",
                driver_error(status, &body),
                self.driver_log()
            ),
            Err(error) => panic!(
                "ChromeDriver did not answer the new session: {error}\n{}",
                self.driver_log()
            ),
        }
    }

    /// ChromeDriver's output so far.
    pub fn driver_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("chromedriver.log")).unwrap_or_default()
    }

    /// One command of the session; the driver's error as an `Err`.
    async fn command(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, WebDriverError> {
        let path = format!("/session/{}{path}", self.session);
        let body = match (method, body) {
            ("POST", None) => Some(json!({})),
            (_, body) => body,
        };
        match request(&self.address, method, &path, body.as_ref()).await {
            Ok((200, answer)) => Ok(answer["value"].clone()),
            Ok((status, answer)) => Err(driver_error(status, &answer)),
            Err(error) => Err(WebDriverError {
                status: 0,
                error: "no answer".to_owned(),
                message: format!("{method} {path}: {error}"),
            }),
        }
    }

    /// [`Browser::command`] that must succeed; `what` names it in the
    /// failure.
    async fn must(&self, what: &str, method: &str, path: &str, body: Option<Value>) -> Value {
        match self.command(method, path, body).await {
            Ok(value) => value,
            Err(error) => panic!("{what}: {error}"),
        }
    }

    /// Load `url` and wait until the document has loaded.
    ///
    /// # Panics
    /// When the browser cannot load it.
    pub async fn navigate(&self, url: &str) {
        self.must(
            &format!("navigate to {url}"),
            "POST",
            "/url",
            Some(json!({ "url": url })),
        )
        .await;
    }

    /// The element `selector` matches first, if any.
    ///
    /// # Panics
    /// When the driver fails otherwise than finding nothing.
    pub async fn try_find(&self, selector: &str) -> Option<Element> {
        let body = json!({ "using": "css selector", "value": selector });
        match self.command("POST", "/element", Some(body)).await {
            Ok(value) => Some(element(selector, &value)),
            Err(error) if error.error == "no such element" => None,
            Err(error) => panic!("find {selector}: {error}"),
        }
    }

    /// The element `selector` matches first.
    ///
    /// # Panics
    /// When nothing matches.
    pub async fn find(&self, selector: &str) -> Element {
        match self.try_find(selector).await {
            Some(found) => found,
            None => panic!("no element matches {selector:?}"),
        }
    }

    /// Every element `selector` matches, in document order.
    ///
    /// # Panics
    /// When the driver fails.
    pub async fn find_all(&self, selector: &str) -> Vec<Element> {
        let body = json!({ "using": "css selector", "value": selector });
        let value = self
            .must(
                &format!("find all {selector}"),
                "POST",
                "/elements",
                Some(body),
            )
            .await;
        value
            .as_array()
            .map(|found| found.iter().map(|value| element(selector, value)).collect())
            .unwrap_or_default()
    }

    /// Wait until an element matching `selector` is in the page and shown
    /// (not `hidden`, not `display: none`), at most `within`.
    ///
    /// # Panics
    /// When none is shown by then, naming the selector.
    pub async fn wait_for(&self, selector: &str, within: Duration) -> Element {
        self.wait_until_script(
            "const found = document.querySelector(arguments[0]); \
             return found !== null && found.getClientRects().length > 0;",
            vec![json!(selector)],
            within,
            &format!("an element shown matching {selector:?}"),
        )
        .await;
        self.find(selector).await
    }

    /// Wait until the JavaScript expression `condition` is truthy in the
    /// page, at most `within`.
    ///
    /// # Panics
    /// When it is not by then, naming the expression.
    pub async fn wait_until(&self, condition: &str, within: Duration) {
        self.wait_until_script(
            &format!("return Boolean({condition});"),
            Vec::new(),
            within,
            &format!("`{condition}` to hold"),
        )
        .await;
    }

    /// Wait until the text of the first element matching `selector`
    /// contains `text`, at most `within`; returns its whole text.
    ///
    /// # Panics
    /// When it does not by then, naming both and the text it had.
    pub async fn wait_for_text(&self, selector: &str, text: &str, within: Duration) -> String {
        let script = "const found = document.querySelector(arguments[0]); \
                      return found !== null && found.textContent.includes(arguments[1]);";
        let deadline = Instant::now() + within;
        loop {
            let holds = self
                .execute(script, vec![json!(selector), json!(text)])
                .await;
            if holds == json!(true) {
                return self.text_of(selector).await.unwrap_or_default();
            }
            if Instant::now() > deadline {
                panic!(
                    "waited {} s for {selector:?} to contain {text:?}; its text is {:?}",
                    within.as_secs_f64(),
                    self.text_of(selector).await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Poll `script` (with `args`) until it returns a truthy value, at most
    /// `within`; `what` names what was waited for in the failure.
    ///
    /// # Panics
    /// When it does not by then.
    pub async fn wait_until_script(
        &self,
        script: &str,
        args: Vec<Value>,
        within: Duration,
        what: &str,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let last_error = match self.try_execute(script, args.clone()).await {
                Ok(value) if truthy(&value) => return value,
                Ok(_) => None,
                Err(error) => Some(error),
            };
            if Instant::now() > deadline {
                let error = last_error
                    .map(|error| format!(" (last error: {error})"))
                    .unwrap_or_default();
                panic!("waited {} s for {what}{error}", within.as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Click `element`.
    ///
    /// # Panics
    /// When it cannot be clicked (hidden, covered, gone).
    pub async fn click(&self, element: &Element) {
        self.must(
            &format!("click {}", element.selector),
            "POST",
            &format!("/element/{}/click", element.id),
            None,
        )
        .await;
    }

    /// Type `text` into `element`, after what it holds.
    ///
    /// # Panics
    /// When it does not take keys.
    pub async fn type_text(&self, element: &Element, text: &str) {
        self.must(
            &format!("type into {}", element.selector),
            "POST",
            &format!("/element/{}/value", element.id),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Empty an input.
    ///
    /// # Panics
    /// When it cannot be cleared.
    pub async fn clear(&self, element: &Element) {
        self.must(
            &format!("clear {}", element.selector),
            "POST",
            &format!("/element/{}/clear", element.id),
            None,
        )
        .await;
    }

    /// The rendered text of `element` (what a reader sees).
    ///
    /// # Panics
    /// When it is gone.
    pub async fn text(&self, element: &Element) -> String {
        let value = self
            .must(
                &format!("text of {}", element.selector),
                "GET",
                &format!("/element/{}/text", element.id),
                None,
            )
            .await;
        value.as_str().unwrap_or_default().to_owned()
    }

    /// The `textContent` of the first element matching `selector`, read in
    /// one script (so a view that re-renders meanwhile cannot leave a stale
    /// reference); `None` when nothing matches.
    pub async fn text_of(&self, selector: &str) -> Option<String> {
        let value = self
            .execute(
                "const found = document.querySelector(arguments[0]); \
                 return found === null ? null : found.textContent;",
                vec![json!(selector)],
            )
            .await;
        value.as_str().map(str::to_owned)
    }

    /// Run `script` as a function body with `args` (elements as
    /// [`Browser::element_arg`]); its return value.
    ///
    /// # Panics
    /// When the script throws.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        match self.try_execute(script, args).await {
            Ok(value) => value,
            Err(error) => panic!("script failed: {error}\n{script}"),
        }
    }

    /// [`Browser::execute`], its error as an `Err`.
    pub async fn try_execute(
        &self,
        script: &str,
        args: Vec<Value>,
    ) -> Result<Value, WebDriverError> {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// `element` as a script argument.
    pub fn element_arg(element: &Element) -> Value {
        element.reference()
    }

    /// The text of the open `alert`/`confirm`/`prompt`, or `None` when no
    /// dialog is open.
    ///
    /// # Panics
    /// When the driver fails otherwise.
    pub async fn dialog_text(&self) -> Option<String> {
        match self.command("GET", "/alert/text", None).await {
            Ok(value) => Some(value.as_str().unwrap_or_default().to_owned()),
            Err(error) if error.error == "no such alert" => None,
            Err(error) => panic!("read the dialog: {error}"),
        }
    }

    /// Wait for a dialog (such as `window.confirm`) at most `within`, then
    /// accept it; returns its text.
    ///
    /// # Panics
    /// When none opens by then.
    pub async fn accept_dialog(&self, within: Duration) -> String {
        let text = self.wait_for_dialog(within).await;
        self.must("accept the dialog", "POST", "/alert/accept", None)
            .await;
        text
    }

    /// Wait for a dialog at most `within`, then dismiss it (`confirm`
    /// answers false); returns its text.
    ///
    /// # Panics
    /// When none opens by then.
    pub async fn dismiss_dialog(&self, within: Duration) -> String {
        let text = self.wait_for_dialog(within).await;
        self.must("dismiss the dialog", "POST", "/alert/dismiss", None)
            .await;
        text
    }

    async fn wait_for_dialog(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(text) = self.dialog_text().await {
                return text;
            }
            if Instant::now() > deadline {
                panic!(
                    "waited {} s for a dialog (alert/confirm) to open",
                    within.as_secs_f64()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Save a PNG screenshot of the window to `path` (its folder is made).
    ///
    /// # Panics
    /// When the browser cannot take it or the file cannot be written.
    pub async fn screenshot(&self, path: &Path) {
        let value = self
            .must("take a screenshot", "GET", "/screenshot", None)
            .await;
        let encoded = value
            .as_str()
            .unwrap_or_else(|| panic!("the screenshot is not base64 text: {value}"));
        let png =
            base64_decode(encoded).unwrap_or_else(|| panic!("the screenshot is not valid base64"));
        assert!(
            png.starts_with(b"\x89PNG"),
            "the screenshot is not a PNG image"
        );
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|error| panic!("create {}: {error}", parent.display()));
        }
        std::fs::write(path, png)
            .unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
    }

    /// Every browser console entry so far, from the page's start (each call
    /// reads the driver's new entries and keeps them).
    ///
    /// # Panics
    /// When the driver cannot be asked.
    pub async fn console_log(&self) -> Vec<LogEntry> {
        let value = self
            .must(
                "read the browser console",
                "POST",
                "/se/log",
                Some(json!({ "type": "browser" })),
            )
            .await;
        let fresh: Vec<LogEntry> = value
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|entry| LogEntry {
                        level: entry["level"].as_str().unwrap_or_default().to_owned(),
                        source: entry["source"].as_str().unwrap_or_default().to_owned(),
                        message: entry["message"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut console = self
            .console
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        console.extend(fresh);
        console.clone()
    }

    /// Fail on every `SEVERE` console entry so far (a JavaScript error, a
    /// Content-Security-Policy violation, a failed load) except those
    /// containing one of `expected` (such as a deliberately refused
    /// request's `status of 401`).
    ///
    /// # Panics
    /// On any other `SEVERE` entry, listing them with the whole log.
    pub async fn assert_no_severe_logs(&self, expected: &[&str]) {
        let log = self.console_log().await;
        let severe: Vec<&LogEntry> = log
            .iter()
            .filter(|entry| entry.level == "SEVERE")
            .filter(|entry| !expected.iter().any(|text| entry.message.contains(text)))
            .collect();
        if !severe.is_empty() {
            let listed: Vec<String> = severe.iter().map(ToString::to_string).collect();
            let whole: Vec<String> = log.iter().map(ToString::to_string).collect();
            panic!(
                "the page logged {} error(s):\n{}\n---- the whole console ----\n{}",
                severe.len(),
                listed.join("\n"),
                whole.join("\n")
            );
        }
    }
}

impl Browser {
    /// For a failing test: the page's address and text, the console and a
    /// screenshot (`target`'s temporary folder), on standard error.
    fn report_failure(&self) {
        let session = format!("/session/{}", self.session);
        let page = blocking_request(
            &self.address,
            "POST",
            &format!("{session}/execute/sync"),
            Some(&json!({
                "script": "return location.href + '\\n' + (document.body ? document.body.innerText : '');",
                "args": [],
            })),
        );
        match page {
            Ok(text) => eprintln!(
                "---- the page when the test failed ----\n{}",
                text.as_str().unwrap_or_default()
            ),
            Err(error) => eprintln!("---- the page could not be read: {error}"),
        }
        let console = self
            .console
            .lock()
            .map(|console| console.clone())
            .unwrap_or_default();
        let fresh = blocking_request(
            &self.address,
            "POST",
            &format!("{session}/se/log"),
            Some(&json!({ "type": "browser" })),
        )
        .unwrap_or_default();
        eprintln!("---- the browser console ----");
        for entry in &console {
            eprintln!("{entry}");
        }
        for entry in fresh.as_array().into_iter().flatten() {
            eprintln!(
                "[{} {}] {}",
                entry["level"].as_str().unwrap_or_default(),
                entry["source"].as_str().unwrap_or_default(),
                entry["message"].as_str().unwrap_or_default()
            );
        }
        let shot = blocking_request(&self.address, "GET", &format!("{session}/screenshot"), None)
            .ok()
            .and_then(|value| value.as_str().and_then(base64_decode));
        if let Some(png) = shot {
            let path = std::env::temp_dir().join(format!(
                "outbox-browser-failure-{}.png",
                uuid::Uuid::now_v7().simple()
            ));
            if std::fs::write(&path, png).is_ok() {
                eprintln!("---- a screenshot of the page: {}", path.display());
            }
        }
    }
}

impl Drop for Browser {
    /// Close the session (Chromium exits), then kill the driver's process
    /// group, so nothing it started outlives the test.
    fn drop(&mut self) {
        if !self.session.is_empty() {
            if std::thread::panicking() {
                self.report_failure();
            }
            let _ = blocking_request(
                &self.address,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            );
        }
        if matches!(self.driver.try_wait(), Ok(None)) {
            let group = format!("-{}", self.driver.id());
            let _ = Command::new("kill")
                .args(["-KILL", "--", &group])
                .stderr(Stdio::null())
                .status();
            let _ = self.driver.kill();
            let _ = self.driver.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The program at `variable`'s path or `default`.
///
/// # Panics
/// When there is no file there, naming the Debian packages.
fn program(variable: &str, default: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    installed(path, variable, name)
}

/// `path`, when a file is there.
///
/// # Panics
/// When none is, naming `name`, `variable` and the Debian packages.
fn installed(path: PathBuf, variable: &str, name: &str) -> PathBuf {
    assert!(
        path.is_file(),
        "{name} is not installed at {} (set {variable} to use another path); {INSTALL_HINT}",
        path.display()
    );
    path
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|error| panic!("bind a loopback port: {error}"));
    listener
        .local_addr()
        .unwrap_or_else(|error| panic!("read a bound port: {error}"))
        .port()
}

fn element(selector: &str, value: &Value) -> Element {
    let id = value[ELEMENT_KEY]
        .as_str()
        .unwrap_or_else(|| panic!("the driver answered {selector:?} with no element: {value}"));
    Element {
        id: id.to_owned(),
        selector: selector.to_owned(),
    }
}

fn driver_error(status: u16, body: &Value) -> WebDriverError {
    WebDriverError {
        status,
        error: body["value"]["error"]
            .as_str()
            .unwrap_or("unknown error")
            .to_owned(),
        message: body["value"]["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| body.to_string()),
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(holds) => *holds,
        Value::Number(number) => number.as_f64().is_some_and(|number| number != 0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// One HTTP/1.1 request with a JSON body to ChromeDriver at `address`, on
/// a connection of its own; the status and the JSON answer.
async fn request(
    address: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|error| format!("connect to {address}: {error}"))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
             Accept: application/json\r\n"
        );
        if method != "GET" && method != "DELETE" || !body.is_empty() {
            head.push_str(&format!(
                "Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|error| format!("send {method} {path}: {error}"))?;
        stream
            .write_all(body.as_bytes())
            .await
            .map_err(|error| format!("send {method} {path}: {error}"))?;
        // ChromeDriver keeps the connection open after its answer: read
        // until the answer is whole, not to the end of the stream.
        let mut raw = Vec::new();
        let mut buffer = vec![0u8; 16 * 1024];
        while !response_complete(&raw) {
            let read = stream
                .read(&mut buffer)
                .await
                .map_err(|error| format!("read the answer to {method} {path}: {error}"))?;
            if read == 0 {
                break;
            }
            raw.extend_from_slice(&buffer[..read]);
        }
        parse_response(&raw).map_err(|error| format!("{method} {path}: {error}"))
    };
    match tokio::time::timeout(COMMAND_LIMIT, exchange).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "{method} {path}: no answer within {} s",
            COMMAND_LIMIT.as_secs()
        )),
    }
}

/// One request on a blocking socket, for `Drop`; the answer's `value`.
fn blocking_request(
    address: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, String> {
    use std::io::{Read, Write};
    let exchange = || -> std::io::Result<Vec<u8>> {
        let mut stream = std::net::TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut raw = Vec::new();
        let mut buffer = vec![0u8; 16 * 1024];
        while !response_complete(&raw) {
            let read = stream.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            raw.extend_from_slice(&buffer[..read]);
        }
        Ok(raw)
    };
    let raw = exchange().map_err(|error| format!("{method} {path}: {error}"))?;
    let (_, answer) = parse_response(&raw)?;
    Ok(answer["value"].clone())
}

/// Whether `raw` holds a whole response: its head, and a body as long as
/// its `Content-Length` or up to the last chunk. A response with neither
/// ends with the connection.
fn response_complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|window| window == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_owned())
        })
    };
    if header("transfer-encoding").is_some_and(|value| value == "chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    match header("content-length").and_then(|value| value.parse::<usize>().ok()) {
        Some(length) => body.len() >= length,
        None => false,
    }
}

/// Status and JSON body of a whole HTTP/1.1 response (`Content-Length` or
/// chunked).
fn parse_response(raw: &[u8]) -> Result<(u16, Value), String> {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| format!("no header end in {:?}", String::from_utf8_lossy(raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut body = raw[split + 4..].to_vec();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    if header("transfer-encoding").is_some_and(|value| value.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body)?;
    } else if let Some(length) = header("content-length").and_then(|value| value.parse().ok()) {
        body.truncate(length);
    }
    if body.is_empty() {
        return Ok((status, Value::Null));
    }
    let value = serde_json::from_slice(&body).map_err(|error| {
        format!(
            "the answer ({status}) is not JSON ({error}): {}",
            String::from_utf8_lossy(&body)
        )
    })?;
    Ok((status, value))
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|window| window == b"\r\n")
            .ok_or("a chunk without its size line")?;
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|error| format!("chunk size {size_text:?}: {error}"))?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = raw.get(..size).ok_or("a chunk shorter than its size")?;
        body.extend_from_slice(chunk);
        raw = raw.get(size + 2..).ok_or("a chunk without its end")?;
    }
}

/// Standard base64 (with or without padding); `None` on any other byte.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\r' | b'\n' => continue,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("iVBORw0K"), Some(b"\x89PNG\r\n".to_vec()));
        assert_eq!(base64_decode("a$"), None);
    }

    #[test]
    fn responses_are_read_with_a_length_or_in_chunks() {
        let sized = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{\"value\":1}\n";
        assert_eq!(parse_response(sized), Ok((200, json!({"value": 1}))));
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:2}\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked), Ok((404, json!({"a": 2}))));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(response_complete(sized));
        assert!(!response_complete(&sized[..sized.len() - 1]));
        assert!(response_complete(chunked));
        assert!(!response_complete(&chunked[..chunked.len() - 2]));
        assert!(!response_complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
        ));
    }

    #[test]
    fn a_missing_program_names_the_debian_packages() {
        let missing =
            std::env::temp_dir().join(format!("no-chromedriver-{}", uuid::Uuid::now_v7().simple()));
        let failed = std::panic::catch_unwind(|| {
            installed(missing, "OUTBOX_TEST_CHROMEDRIVER", "ChromeDriver")
        })
        .expect_err("a missing program fails");
        let message = failed
            .downcast::<String>()
            .map(|message| *message)
            .unwrap_or_default();
        for named in [
            "ChromeDriver is not installed",
            "OUTBOX_TEST_CHROMEDRIVER",
            "`chromium`",
            "`chromium-driver`",
        ] {
            assert!(message.contains(named), "{named} in {message:?}");
        }
    }

    fn page(html: &str) -> String {
        let mut encoded = String::from("data:text/html;charset=utf-8,");
        for byte in html.bytes() {
            if byte.is_ascii_alphanumeric() {
                encoded.push(byte as char);
            } else {
                encoded.push_str(&format!("%{byte:02X}"));
            }
        }
        encoded
    }

    /// The harness against a page of its own: find, type, click, answer a
    /// confirm, wait for text, screenshot, and a JavaScript error in the
    /// console is caught.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drives_a_page_and_catches_its_errors() {
        let browser = Browser::start().await;
        browser
            .navigate(&page(
                "<input id=name><button id=go>go</button><p id=out></p>\
                 <script>document.getElementById('go').onclick = function () {\
                   var yes = window.confirm('really?');\
                   document.getElementById('out').textContent =\
                     (yes ? 'yes ' : 'no ') + document.getElementById('name').value;\
                 };</script>",
            ))
            .await;
        let name = browser.find("#name").await;
        browser.type_text(&name, "<b>bold</b>").await;
        browser.click(&browser.find("#go").await).await;
        assert_eq!(
            browser.accept_dialog(Duration::from_secs(10)).await,
            "really?"
        );
        let text = browser
            .wait_for_text("#out", "yes", Duration::from_secs(10))
            .await;
        assert_eq!(text, "yes <b>bold</b>");
        assert!(browser.find_all("b").await.is_empty());
        browser.click(&browser.find("#go").await).await;
        browser.dismiss_dialog(Duration::from_secs(10)).await;
        browser
            .wait_for_text("#out", "no", Duration::from_secs(10))
            .await;
        assert_eq!(browser.dialog_text().await, None);
        assert!(browser.try_find("#absent").await.is_none());

        let shot = std::env::temp_dir().join(format!(
            "outbox-browser-shot-{}.png",
            uuid::Uuid::now_v7().simple()
        ));
        browser.screenshot(&shot).await;
        let png = std::fs::read(&shot).expect("read the screenshot back");
        assert!(png.starts_with(b"\x89PNG"));
        // The IHDR chunk: width and height, big-endian, at bytes 16..24.
        let size = |at: usize| u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]);
        assert_eq!(
            (size(16), size(20)),
            WINDOW_SIZE,
            "the screenshot is the viewport"
        );
        std::fs::remove_file(&shot).expect("remove the screenshot");

        browser.assert_no_severe_logs(&[]).await;
        browser
            .execute(
                "window.setTimeout(function () { undefinedFunction(); }, 0); return null;",
                Vec::new(),
            )
            .await;
        browser
            .wait_until("document.readyState === 'complete'", Duration::from_secs(5))
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !browser
            .console_log()
            .await
            .iter()
            .any(|entry| entry.level == "SEVERE" && entry.message.contains("undefinedFunction"))
        {
            assert!(
                Instant::now() < deadline,
                "the JavaScript error never reached the console log: {:?}",
                browser.console_log().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caught = tokio::spawn(async move {
            browser.assert_no_severe_logs(&[]).await;
        })
        .await;
        assert!(caught.is_err(), "a JavaScript error fails the check");
    }

    /// A wait that never holds fails naming what it waited for.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_that_never_holds_names_what_it_waited_for() {
        let browser = Browser::start().await;
        browser.navigate(&page("<p id=here>here</p>")).await;
        browser.wait_for("#here", Duration::from_secs(10)).await;
        let failed = tokio::spawn(async move {
            browser.wait_for("#never", Duration::from_millis(300)).await;
        })
        .await
        .expect_err("the wait fails");
        let message = failed
            .into_panic()
            .downcast::<String>()
            .map(|message| *message)
            .unwrap_or_default();
        assert!(message.contains("#never"), "{message}");
    }
}

// The relay's operators' page: the overview, dead events grouped by
// failure, one event's detail and the actions on them.
//
// Everything shown comes from /ui/api/ and is user data (payloads, headers,
// errors), so the DOM is built with createElement and textContent only; the
// page runs under a Content-Security-Policy without inline scripts, inline
// styles or eval.
(function () {
  "use strict";

  var TOKEN_KEY = "outbox-relay-ui-token";
  var REFRESH_MS = 3000;
  var STATES = ["pending", "in_flight", "retrying", "dead", "published"];

  var state = {
    actionsEnabled: false,
    overviewTimer: null,
    // The overview's fetch under way, if any.
    overviewLoading: null,
    // The filters the listed groups were read with; a group action sends
    // the same ones, so it acts on what the page shows.
    appliedFilters: {},
    deadLoaded: false,
    detailId: null,
    detailRequest: 0,
    deadRequest: 0
  };

  function $(id) {
    return document.getElementById(id);
  }

  // An element with a class, text and attributes; children appended.
  function el(tag, options, children) {
    var node = document.createElement(tag);
    options = options || {};
    if (options.className) node.className = options.className;
    if (options.text !== undefined && options.text !== null) node.textContent = String(options.text);
    if (options.title) node.title = String(options.title);
    if (options.data) {
      Object.keys(options.data).forEach(function (key) {
        node.setAttribute("data-" + key, String(options.data[key]));
      });
    }
    if (options.attrs) {
      Object.keys(options.attrs).forEach(function (key) {
        node.setAttribute(key, String(options.attrs[key]));
      });
    }
    (children || []).forEach(function (child) {
      if (child !== null && child !== undefined) node.appendChild(child);
    });
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // ---- formatting -------------------------------------------------------

  var numberFormat = new Intl.NumberFormat("en-US");

  function count(value) {
    return typeof value === "number" ? numberFormat.format(value) : "\u2013";
  }

  function rate(value) {
    if (typeof value !== "number") return "\u2013";
    return (value >= 100 ? value.toFixed(0) : value.toFixed(value >= 10 ? 1 : 2)) + " /s";
  }

  function age(seconds) {
    if (typeof seconds !== "number") return "none";
    if (seconds < 60) return seconds.toFixed(seconds < 10 ? 1 : 0) + " s";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min " + Math.floor(seconds % 60) + " s";
    var hours = Math.floor(minutes / 60);
    if (hours < 48) return hours + " h " + (minutes % 60) + " min";
    return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
  }

  function bytes(value) {
    if (typeof value !== "number") return "\u2013";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var index = 0;
    while (value >= 1024 && index < units.length - 1) {
      value /= 1024;
      index += 1;
    }
    return (index === 0 ? value.toFixed(0) : value.toFixed(1)) + " " + units[index];
  }

  // "2026-12-06T21:00:00.123Z" -> "2026-12-06 21:00:00Z" (the API speaks UTC).
  function time(text) {
    if (!text) return "\u2013";
    var match = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)/.exec(String(text));
    return match ? match[1] + " " + match[2] + "Z" : String(text);
  }

  function ago(text) {
    var at = Date.parse(text);
    if (isNaN(at)) return "";
    var seconds = (Date.now() - at) / 1000;
    if (seconds < 0) return "in " + age(-seconds);
    return age(seconds) + " ago";
  }

  // A cell showing a time, with its age and the exact value on hover.
  function timeCell(text, className) {
    return el("td", { className: "time " + (className || ""), text: time(text), title: text ? text + " (" + ago(text) + ")" : "" });
  }

  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }

  // ---- the API ----------------------------------------------------------

  function token() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY) || "";
    } catch (error) {
      return "";
    }
  }

  // fetch a JSON document; a failure throws an Error whose message is
  // "<status>: <the server's error text>".
  function api(method, path, body, withToken) {
    var headers = { Accept: "application/json" };
    var init = { method: method, headers: headers, credentials: "same-origin", cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    if (withToken && token()) headers.Authorization = "Bearer " + token();
    return window.fetch(path, init).then(
      function (response) {
        return response.text().then(function (text) {
          var data = null;
          try {
            data = text ? JSON.parse(text) : null;
          } catch (error) {
            data = null;
          }
          if (!response.ok) {
            var reason = data && typeof data.error === "string" ? data.error : text || response.statusText;
            var failure = new Error(response.status + ": " + reason);
            failure.status = response.status;
            throw failure;
          }
          if (data === null) throw new Error(response.status + ": the answer is not JSON");
          return data;
        });
      },
      function (error) {
        throw new Error("the relay did not answer: " + error.message);
      }
    );
  }

  function showError(message) {
    var banner = $("error-banner");
    banner.textContent = message;
    banner.hidden = false;
  }

  function hideError() {
    $("error-banner").hidden = true;
  }

  function showResult(message, failed) {
    var line = $("action-result");
    line.textContent = message;
    line.className = "banner banner-result " + (failed ? "failed" : "succeeded");
    line.hidden = false;
  }

  // ---- overview ---------------------------------------------------------

  function fillCounts(container, counts) {
    STATES.forEach(function (name) {
      var cell = container.querySelector('[data-field="' + name + '"]');
      if (cell) cell.textContent = count(counts ? counts[name] : undefined);
    });
  }

  function renderOverview(data) {
    $("source").textContent = data.source ? "source: " + data.source : "";
    fillCounts($("totals"), data.totals || {});
    var dead = data.totals && data.totals.dead;
    $("totals").classList.toggle("has-dead", typeof dead === "number" && dead > 0);
    var deadCount = $("tab-dead-count");
    deadCount.textContent = count(dead);
    deadCount.hidden = !(typeof dead === "number" && dead > 0);

    $("oldest-pending").textContent = age(data.oldest_pending_age_seconds);
    $("publish-rate").textContent = rate(data.publish_rate_per_second);
    $("failure-rate").textContent = rate(data.failure_rate_per_second);
    $("failure-rate").classList.toggle("bad", typeof data.failure_rate_per_second === "number" && data.failure_rate_per_second > 0);

    var broker = $("broker-state");
    broker.classList.remove("good", "bad", "muted");
    if (!data.broker) {
      broker.textContent = "not in this process";
      broker.classList.add("muted");
      broker.title = "Served without a relay: no broker client to ask";
    } else if (data.broker.ready) {
      broker.textContent = "ready";
      broker.classList.add("good");
      broker.title = "";
    } else {
      broker.textContent = "not ready";
      broker.classList.add("bad");
      broker.title = data.broker.reason || "";
      if (data.broker.reason) broker.appendChild(el("span", { className: "tile-note", text: data.broker.reason }));
    }

    renderTopics(data.topics || []);
    renderRelays(data.relays || []);
    renderLogical(data.logical);
    setActionsEnabled(Boolean(data.actions && data.actions.enabled));
  }

  function renderTopics(topics) {
    var body = $("topics").tBodies[0];
    clear(body);
    if (topics.length === 0) {
      body.appendChild(el("tr", { className: "empty" }, [el("td", { text: "No events in the outbox.", attrs: { colspan: 6 } })]));
      return;
    }
    topics.forEach(function (topic) {
      var row = el("tr", { data: { topic: topic.topic } }, [el("td", { className: "text mono", text: topic.topic })]);
      STATES.forEach(function (name) {
        var value = topic[name];
        var cell = el("td", { className: "num", data: { field: name }, text: count(value) });
        if (name === "dead" && typeof value === "number" && value > 0) {
          cell.classList.add("bad", "link");
          cell.title = "Show this topic's dead events";
          cell.addEventListener("click", function () {
            clearFilters();
            $("filter-topic").value = topic.topic;
            state.appliedFilters = readFilters();
            state.deadLoaded = false;
            window.location.hash = "#dead";
          });
        }
        if (typeof value === "number" && value === 0) cell.classList.add("zero");
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
  }

  function renderRelays(relays) {
    var body = $("relays").tBodies[0];
    clear(body);
    if (relays.length === 0) {
      body.appendChild(el("tr", { className: "empty" }, [el("td", { text: "No relay holds a lease.", attrs: { colspan: 4 } })]));
      return;
    }
    relays.forEach(function (relay) {
      body.appendChild(
        el("tr", { data: { relay: relay.relay_id } }, [
          el("td", { className: "text mono nowrap", text: relay.relay_id }),
          el("td", { className: "num", text: count((relay.partitions || []).length) }),
          el("td", { className: "text", text: partitionRanges(relay.partitions || []), title: leaseTokens(relay.partitions || []) }),
          timeCell(relay.expires_at)
        ])
      );
    });
  }

  function sortedPartitions(partitions) {
    return partitions.slice().sort(function (a, b) {
      return a.partition - b.partition;
    });
  }

  // [{partition: 0}, {partition: 1}, {partition: 2}, {partition: 5}]
  // -> "0–2, 5". Partition -1 is the lease of the logical stream.
  function partitionRanges(partitions) {
    if (partitions.length === 0) return "none";
    var runs = [];
    sortedPartitions(partitions).forEach(function (p) {
      var last = runs[runs.length - 1];
      if (last && p.partition >= 0 && last.last >= 0 && p.partition === last.last + 1) last.last = p.partition;
      else runs.push({ first: p.partition, last: p.partition });
    });
    return runs
      .map(function (run) {
        if (run.first === -1) return "logical stream";
        return run.first === run.last ? String(run.first) : run.first + "\u2013" + run.last;
      })
      .join(", ");
  }

  // Each partition's lease token (the fencing token), for the tooltip.
  function leaseTokens(partitions) {
    return sortedPartitions(partitions)
      .map(function (p) {
        return (p.partition === -1 ? "logical stream" : "partition " + p.partition) + ": lease token " + p.lease_token;
      })
      .join("\n");
  }

  function renderLogical(logical) {
    var section = $("logical");
    if (!logical) {
      section.hidden = true;
      return;
    }
    section.hidden = false;
    $("logical-slot").textContent = logical.slot;
    $("logical-active").textContent = logical.active ? "yes" : "no";
    $("logical-active").className = logical.active ? "good" : "bad";
    $("logical-lag").textContent = bytes(logical.lag_bytes);
    $("logical-retained").textContent = bytes(logical.retained_wal_bytes);
  }

  function loadOverview() {
    if (state.overviewLoading) return state.overviewLoading;
    state.overviewLoading = api("GET", "/ui/api/overview")
      .then(function (data) {
        renderOverview(data);
        hideError();
        var now = new Date();
        $("last-refresh").textContent = now.toISOString().slice(11, 19) + "Z";
        $("last-refresh").title = now.toISOString();
      })
      .catch(function (error) {
        showError("Reading the overview failed: " + error.message);
      })
      .then(function () {
        state.overviewLoading = null;
      });
    return state.overviewLoading;
  }

  // The refresh loop: one fetch at a time, the next 3 s after the last.
  function scheduleOverview() {
    window.clearTimeout(state.overviewTimer);
    loadOverview().then(function () {
      window.clearTimeout(state.overviewTimer);
      state.overviewTimer = window.setTimeout(scheduleOverview, REFRESH_MS);
    });
  }

  // ---- actions ----------------------------------------------------------

  function setActionsEnabled(enabled) {
    state.actionsEnabled = enabled;
    document.body.classList.toggle("actions-enabled", enabled);
    $("signin").hidden = !enabled;
    Array.prototype.forEach.call(document.querySelectorAll(".action"), function (button) {
      button.hidden = !enabled;
    });
  }

  function actionButton(label, className, handler) {
    var button = el("button", { className: "action " + className, text: label, attrs: { type: "button" } });
    button.hidden = !state.actionsEnabled;
    button.addEventListener("click", function (event) {
      event.stopPropagation();
      handler(button);
    });
    return button;
  }

  // Ask, POST, reload the views, then report the server's "changed" count
  // (or its error): once the result shows, the views show what follows.
  function act(question, path, body, verb, button) {
    if (!window.confirm(question)) return;
    if (button) button.disabled = true;
    $("action-result").hidden = true;
    api("POST", path, body, true)
      .then(function (data) {
        var changed = typeof data.changed === "number" ? data.changed : 0;
        return { message: verb + " " + plural(changed, "event"), failed: false };
      })
      .catch(function (error) {
        return { message: error.message, failed: true };
      })
      .then(function (result) {
        if (button) button.disabled = false;
        return reloadAfterAction().then(function () {
          showResult(result.message, result.failed);
        });
      });
  }

  function reloadAfterAction() {
    // A refresh under way may have read the table before the action.
    var overview = state.overviewLoading ? state.overviewLoading.then(loadOverview) : loadOverview();
    var pending = [overview];
    if (currentRoute().view === "dead") pending.push(loadDead());
    else state.deadLoaded = false;
    if (state.detailId !== null) pending.push(loadDetail(state.detailId));
    return Promise.all(pending);
  }

  // ---- token ------------------------------------------------------------

  function checkToken() {
    var stateLine = $("token-state");
    var stored = token();
    $("token-clear").hidden = !stored;
    if (!stored) {
      stateLine.textContent = "not signed in";
      stateLine.className = "token-state";
      return Promise.resolve();
    }
    stateLine.textContent = "checking\u2026";
    return api("GET", "/ui/api/whoami", undefined, true)
      .then(function (data) {
        stateLine.textContent = "signed in as " + (data.name || "?");
        stateLine.className = "token-state good";
      })
      .catch(function (error) {
        stateLine.textContent = "token refused (" + error.message + ")";
        stateLine.className = "token-state bad";
      });
  }

  function saveToken() {
    var value = $("token").value.trim();
    try {
      if (value) window.sessionStorage.setItem(TOKEN_KEY, value);
      else window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (error) {
      showError("The browser refused to keep the token: " + error.message);
    }
    $("token").value = "";
    $("token").placeholder = value ? "token kept for this tab" : "bearer token for actions";
    return checkToken();
  }

  function forgetToken() {
    try {
      window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (error) {
      // Nothing kept.
    }
    $("token").value = "";
    $("token").placeholder = "bearer token for actions";
    checkToken();
  }

  // ---- dead events ------------------------------------------------------

  var FILTERS = [
    ["topic", "filter-topic"],
    ["event_type", "filter-type"],
    ["aggregate", "filter-aggregate"],
    ["error", "filter-error"],
    ["since", "filter-since"],
    ["until", "filter-until"]
  ];

  function readFilters() {
    var filters = {};
    FILTERS.forEach(function (pair) {
      var value = $(pair[1]).value.trim();
      if (value) filters[pair[0]] = value;
    });
    return filters;
  }

  function clearFilters() {
    FILTERS.forEach(function (pair) {
      $(pair[1]).value = "";
    });
  }

  function query(filters) {
    var parts = Object.keys(filters).map(function (key) {
      return encodeURIComponent(key) + "=" + encodeURIComponent(filters[key]);
    });
    return parts.length ? "?" + parts.join("&") : "";
  }

  function loadDead() {
    var filters = state.appliedFilters;
    var request = ++state.deadRequest;
    return api("GET", "/ui/api/dead" + query(filters))
      .then(function (data) {
        if (request !== state.deadRequest) return;
        renderGroups(data, filters);
        state.deadLoaded = true;
      })
      .catch(function (error) {
        if (request !== state.deadRequest) return;
        showError("Reading the dead events failed: " + error.message);
      });
  }

  function renderGroups(data, filters) {
    var groups = data.groups || [];
    var container = $("groups");
    clear(container);
    var total = groups.reduce(function (sum, group) {
      return sum + (group.count || 0);
    }, 0);
    var filtered = Object.keys(filters).length > 0;
    $("dead-summary").textContent =
      plural(total, "dead event") +
      " in " +
      plural(groups.length, "failure group") +
      (filtered ? " matching the filters" : "") +
      (data.capped ? " (only the oldest " + count(data.rows_cap || data.rows_read) + " were read; narrow the filters to see the rest)" : "");
    if (groups.length === 0) {
      container.appendChild(el("p", { className: "empty-state", text: filtered ? "No dead event matches the filters." : "No dead events." }));
      return;
    }
    groups.forEach(function (group) {
      container.appendChild(renderGroup(group, filters));
    });
  }

  function renderGroup(group, filters) {
    var events = group.events || [];
    var retry = actionButton("Retry " + plural(group.count, "event"), "group-retry", function (button) {
      act(
        "Retry all " + plural(group.count, "dead event") + " of this failure group?\n\n" + group.pattern,
        "/ui/api/groups/" + encodeURIComponent(group.fingerprint) + "/retry",
        filters,
        "retried",
        button
      );
    });
    var discard = actionButton("Discard", "group-discard danger", function (button) {
      act(
        "Discard all " + plural(group.count, "dead event") + " of this failure group? They will never be published.\n\n" + group.pattern,
        "/ui/api/groups/" + encodeURIComponent(group.fingerprint) + "/discard",
        filters,
        "discarded",
        button
      );
    });

    var head = el("div", { className: "group-head" }, [
      el("span", { className: "group-count", text: count(group.count), title: "dead events in this group" }),
      el("div", { className: "group-main" }, [
        el("code", { className: "group-pattern", text: group.pattern }),
        el(
          "div",
          { className: "group-meta" },
          spaced([
            topicsLabel(group.events || []),
            metaItem("first ", el("span", { className: "group-first-seen", text: time(group.first_seen), title: group.first_seen || "" })),
            metaItem("last ", el("span", { className: "group-last-seen", text: time(group.last_seen), title: group.last_seen || "" })),
            metaItem("fingerprint ", el("span", { className: "mono", text: group.fingerprint }))
          ])
        )
      ]),
      el("div", { className: "group-actions" }, [retry, discard])
    ]);

    var hasPreview = events.some(function (event) {
      return event.payload_preview !== undefined || event.payload !== undefined;
    });
    // The table keeps no time of death on every backend: the column shows
    // only when the server sends one.
    var hasDeadAt = events.some(function (event) {
      return Boolean(event.dead_at);
    });
    var topics = events
      .map(function (event) {
        return event.topic;
      })
      .filter(function (topic, index, all) {
        return all.indexOf(topic) === index;
      });
    // One topic: named once in the group's head instead of on each row.
    var hasTopic = topics.length !== 1;
    var headings = ["ID"];
    if (hasTopic) headings.push("Topic");
    headings = headings.concat(["Event type", "Aggregate", "Attempts", "Created"]);
    if (hasDeadAt) headings.push("Dead since");
    headings.push("Last error");
    if (hasPreview) headings.push("Payload");
    var headRow = el(
      "tr",
      {},
      headings.map(function (name) {
        var className = name === "Attempts" || name === "ID" ? "num" : "text";
        if (name === "Last error") className += " fill";
        return el("th", { className: className, text: name });
      })
    );
    var body = el("tbody");
    events.forEach(function (event) {
      body.appendChild(renderDeadEvent(event, hasTopic, hasDeadAt, hasPreview));
    });
    var table = el("table", { className: "grid events" }, [el("thead", {}, [headRow]), body]);
    var children = [head, table];
    if (group.truncated) {
      children.push(el("p", { className: "muted truncated", text: "Showing the first " + events.length + " of " + count(group.count) + " events; narrow the filters to see the rest." }));
    }
    return el("section", { className: "group", data: { fingerprint: group.fingerprint } }, children);
  }

  // The nodes with a space between each two, where a line may break.
  function spaced(nodes) {
    var out = [];
    nodes.forEach(function (node) {
      if (node === null) return;
      if (out.length > 0) out.push(document.createTextNode(" "));
      out.push(node);
    });
    return out;
  }

  // "label value", kept on one line.
  function metaItem(label, value) {
    return el("span", { className: "meta-item" }, [document.createTextNode(label), value]);
  }

  function topicsLabel(events) {
    var topics = [];
    events.forEach(function (event) {
      if (topics.indexOf(event.topic) === -1) topics.push(event.topic);
    });
    if (topics.length === 1) return metaItem("topic ", el("span", { className: "mono", text: topics[0] }));
    return topics.length > 1 ? metaItem("", el("span", { text: topics.length + " topics" })) : null;
  }

  function preview(event) {
    var value = event.payload_preview !== undefined ? event.payload_preview : event.payload;
    var text = typeof value === "string" ? value : JSON.stringify(value);
    return text && text.length > 120 ? text.slice(0, 120) + "\u2026" : text || "";
  }

  function renderDeadEvent(event, hasTopic, hasDeadAt, hasPreview) {
    var row = el("tr", { className: "dead-event", data: { "event-id": event.id }, title: "Open event " + event.id }, [el("td", { className: "num mono", text: event.id })]);
    if (hasTopic) row.appendChild(el("td", { className: "text mono topic", title: event.topic }, [el("div", { className: "clip", text: event.topic })]));
    [
      el("td", { className: "text", text: event.event_type }),
      el("td", { className: "text mono", text: event.aggregate_type + ":" + event.aggregate_id }),
      el("td", { className: "num", text: count(event.attempts) }),
      timeCell(event.created_at)
    ].forEach(function (cell) {
      row.appendChild(cell);
    });
    if (hasDeadAt) row.appendChild(timeCell(event.dead_at));
    row.appendChild(el("td", { className: "text last-error fill", text: event.last_error || "", title: event.last_error || "" }));
    if (hasPreview) row.appendChild(el("td", { className: "text mono payload-preview", title: preview(event) }, [el("div", { className: "clip", text: preview(event) })]));
    row.addEventListener("click", function () {
      window.location.hash = "#event/" + encodeURIComponent(event.id);
    });
    return row;
  }

  // ---- event detail -----------------------------------------------------

  function field(label, value, className) {
    return el("tr", {}, [el("th", { text: label }), el("td", { className: className || "", text: value === null || value === undefined || value === "" ? "\u2013" : value })]);
  }

  function loadDetail(id) {
    state.detailId = id;
    var request = ++state.detailRequest;
    var panel = $("event-detail");
    panel.hidden = false;
    document.body.classList.add("drawer-open");
    return api("GET", "/ui/api/events/" + encodeURIComponent(id))
      .then(function (event) {
        if (request !== state.detailRequest) return;
        renderDetail(event);
      })
      .catch(function (error) {
        if (request !== state.detailRequest) return;
        renderDetailError(id, error);
      });
  }

  function renderDetailError(id, error) {
    $("event-title").textContent = "Event " + id;
    $("event-state").textContent = "";
    clear($("event-actions"));
    clear($("event-fields").tBodies[0]);
    $("event-fields").tBodies[0].appendChild(field("Error", error.message, "bad"));
    $("event-last-error").textContent = "";
    $("event-payload").textContent = "";
    clear($("event-headers").tBodies[0]);
  }

  function renderDetail(event) {
    $("event-title").textContent = "Event " + event.id;
    var stateBadge = $("event-state");
    stateBadge.textContent = event.state;
    stateBadge.className = "state state-" + String(event.state).replace(/[^a-z_]/g, "");

    var actions = $("event-actions");
    clear(actions);
    if (event.retryable) {
      var retry = actionButton("Retry", "event-retry", function (button) {
        act("Retry dead event " + event.id + " (" + event.event_type + ")?", "/ui/api/events/" + encodeURIComponent(event.id) + "/retry", {}, "retried", button);
      });
      retry.id = "event-retry";
      actions.appendChild(retry);
    }
    if (event.discardable) {
      var discard = actionButton("Discard", "event-discard danger", function (button) {
        act("Discard event " + event.id + " (" + event.event_type + ")? It will never be published.", "/ui/api/events/" + encodeURIComponent(event.id) + "/discard", {}, "discarded", button);
      });
      discard.id = "event-discard";
      actions.appendChild(discard);
    }

    var fields = $("event-fields").tBodies[0];
    clear(fields);
    [
      field("Event id", event.event_id, "mono"),
      field("Topic", event.topic, "mono"),
      field("Type", event.event_type + (event.event_version !== undefined ? " (version " + event.event_version + ")" : "")),
      field("Source", event.source, "mono"),
      field("Aggregate", event.aggregate_type + ":" + event.aggregate_id, "mono"),
      field("Attempts", count(event.attempts)),
      field("Created", event.created_at ? time(event.created_at) + "  (" + ago(event.created_at) + ")" : null),
      field("Next attempt", event.next_attempt_at ? time(event.next_attempt_at) + "  (" + ago(event.next_attempt_at) + ")" : null),
      field("Published", event.published_at ? time(event.published_at) + "  (" + ago(event.published_at) + ")" : null)
    ].forEach(function (row) {
      fields.appendChild(row);
    });

    var lastError = $("event-last-error");
    lastError.textContent = event.last_error || "none";
    lastError.classList.toggle("muted", !event.last_error);

    var payload;
    try {
      payload = JSON.stringify(event.payload, null, 2);
    } catch (error) {
      payload = String(event.payload);
    }
    $("event-payload").textContent = payload === undefined ? "" : payload;

    var headers = $("event-headers").tBodies[0];
    clear(headers);
    var names = event.headers ? Object.keys(event.headers).sort() : [];
    if (names.length === 0) headers.appendChild(el("tr", { className: "empty" }, [el("td", { text: "No headers." })]));
    names.forEach(function (name) {
      var value = event.headers[name];
      headers.appendChild(el("tr", {}, [el("th", { className: "mono", text: name }), el("td", { className: "mono", text: typeof value === "string" ? value : JSON.stringify(value) })]));
    });
  }

  function closeDetail() {
    state.detailId = null;
    state.detailRequest += 1;
    $("event-detail").hidden = true;
    document.body.classList.remove("drawer-open");
  }

  // ---- routing ----------------------------------------------------------

  function currentRoute() {
    var hash = window.location.hash || "#overview";
    var match = /^#event\/(.+)$/.exec(hash);
    if (match) return { view: "dead", event: decodeURIComponent(match[1]) };
    if (hash === "#dead") return { view: "dead", event: null };
    return { view: "overview", event: null };
  }

  function route() {
    var current = currentRoute();
    $("overview").hidden = current.view !== "overview";
    $("dead").hidden = current.view !== "dead";
    $("tab-overview").classList.toggle("active", current.view === "overview");
    $("tab-dead").classList.toggle("active", current.view === "dead");
    if (current.view === "dead" && !state.deadLoaded) loadDead();
    if (current.event !== null) {
      if (current.event !== state.detailId) loadDetail(current.event);
    } else if (state.detailId !== null) {
      closeDetail();
    }
    window.scrollTo(0, 0);
  }

  function start() {
    // The form never submits (its CSP allows no form action): Enter or
    // the button keep the token.
    $("signin").addEventListener("submit", function (event) {
      event.preventDefault();
      saveToken();
    });
    $("token-clear").addEventListener("click", forgetToken);
    $("filters").addEventListener("submit", function (event) {
      event.preventDefault();
      state.appliedFilters = readFilters();
      loadDead();
    });
    $("filter-clear").addEventListener("click", function () {
      clearFilters();
      state.appliedFilters = {};
      loadDead();
    });
    $("dead-reload").addEventListener("click", function () {
      loadDead();
    });
    $("event-close").addEventListener("click", function () {
      window.location.hash = "#dead";
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && state.detailId !== null) window.location.hash = "#dead";
    });
    window.addEventListener("hashchange", route);
    setActionsEnabled(false);
    if (token()) $("token").placeholder = "token kept for this tab";
    checkToken();
    route();
    scheduleOverview();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

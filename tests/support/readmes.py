"""A README holding every construct GitHub renders beyond CommonMark, and what GitHub makes of each.

GFM_README is the fixture (tests/web/test_markdown.py compares the renderer's HTML with GITHUB, and
tests/e2e/test_ui_readme_browser.py looks at it in Chromium). GITHUB is GitHub's HTML for each
construct as its documentation shows it ("Basic writing and formatting syntax", "Alerts",
"About task lists", "Organizing information with tables", "Creating and highlighting code
blocks"), less what GitHub adds for its own scripts: the octicon `<svg>` in an alert's title,
`dir="auto"`, the checkbox's empty `id`, and `notranslate position-relative overflow-auto`.
"""

from __future__ import annotations

ALERT_TEXT = {
    "NOTE": "Useful information that users should know, even when skimming content.",
    "TIP": "Helpful advice for doing things better or more easily.",
    "IMPORTANT": "Key information users need to know to achieve their goal.",
    "WARNING": "Urgent info that needs immediate user attention to avoid problems.",
    "CAUTION": "Advises about risks or negative outcomes of certain actions.",
}
WIDE_HEADERS = ("Name", "Description", "Type", "Default", "Required")

GFM_README = (
    "# Every construct\n\n"
    + "".join(f"> [!{kind}]\n> {text}\n\n" for kind, text in ALERT_TEXT.items())
    + """> A plain quotation.

- [x] Create the VPC
- [ ] Add IPv6
  - [ ] Subnets first

| Left | Centre | Right |
| :--- | :----: | ----: |
| l | c | r |

Press <kbd>Ctrl</kbd>+<kbd>C</kbd> to copy.

```hcl
module "vpc" {
  source  = "registry.example.com/acme/vpc/aws"
  version = "~> 5.4" # follows minor releases
  cidr    = 10
}
```

```text
plain, not highlighted
```

| Name | Description | Type | Default | Required |
|------|-------------|------|---------|:--------:|
"""
    + "".join(
        f'| <a name="input_{name}"></a> [{escaped}](#input\\_{escaped}) '
        f"| {text} | `{kind}` | {default} | {required} |\n"
        for name, text, kind, default, required in (
            (
                "default_security_group_ingress",
                (
                    "List of maps of ingress rules to set on the default security group of the VPC, each with"
                    " its own ports and CIDR blocks"
                ),
                "list(map(string))",
                "`[]`",
                "no",
            ),
            ("enable_dns_hostnames", "Should be true to enable DNS hostnames in the VPC", "bool", "`true`", "no"),
            ("name", "Name to be used on all the resources as identifier", "string", "n/a", "yes"),
        )
        for escaped in [name.replace("_", "\\_")]
    )
)

# GitHub's HTML for each construct of GFM_README (see the module docstring for what is left out).
GITHUB = {
    "alerts": [
        f'<div class="markdown-alert markdown-alert-{kind.lower()}"><p class="markdown-alert-title">'
        f"{kind.capitalize()}</p><p>{text}</p></div>"
        for kind, text in ALERT_TEXT.items()
    ],
    "blockquote": "<blockquote><p>A plain quotation.</p></blockquote>",
    "tasks": (
        '<ul class="contains-task-list">'
        '<li class="task-list-item"><input type="checkbox" class="task-list-item-checkbox" disabled checked>'
        " Create the VPC</li>"
        '<li class="task-list-item"><input type="checkbox" class="task-list-item-checkbox" disabled> Add IPv6'
        '<ul class="contains-task-list"><li class="task-list-item">'
        '<input type="checkbox" class="task-list-item-checkbox" disabled> Subnets first</li></ul></li></ul>'
    ),
    "aligned": (
        '<table><thead><tr><th align="left">Left</th><th align="center">Centre</th><th align="right">Right</th>'
        '</tr></thead><tbody><tr><td align="left">l</td><td align="center">c</td><td align="right">r</td>'
        "</tr></tbody></table>"
    ),
    "kbd": "<p>Press <kbd>Ctrl</kbd>+<kbd>C</kbd> to copy.</p>",
    # Highlighted code: a `div.highlight` around the `<pre>`, each token a classed `<span>` (GitHub's
    # classes are `pl-*` from its own highlighter; ours are Pygments' short names, styled the same way).
    "code": '<div class="highlight highlight-source-hcl"><pre>',
    "plain code": "<pre><code>plain, not highlighted\n</code></pre>",
}

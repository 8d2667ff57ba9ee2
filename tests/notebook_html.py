"""Helpers the notebook tests share: a strict HTML check and text extraction."""
from html.parser import HTMLParser

VOID = {"br", "hr", "img", "input", "meta", "link", "col", "area", "base", "source", "wbr"}


class StrictHTML(HTMLParser):
    """Parses and records every element; fails on a close tag that does not match the open
    one, on an unclosed element and on markup the renderings must not use."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()


def parse(html: str) -> StrictHTML:
    p = StrictHTML()
    p.feed(html)
    p.close()
    assert not p.errors, p.errors[:5]
    assert not p.stack, f"unclosed: {p.stack[:5]}"
    names = {t for t, _ in p.tags}
    assert "script" not in names and "style" not in names, "no JS, no <style> blocks"
    assert not any("class" in a for _, a in p.tags), "inline styles only, no classes"
    assert not any(k.startswith("on") for _, a in p.tags for k in a), "no event handlers"
    return p


class _PreText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.blocks: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self.depth += 1
            self.blocks.append("")

    def handle_endtag(self, tag):
        if tag == "pre":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.blocks[-1] += data


def pre_texts(html: str) -> list[str]:
    """The text content of every <pre>, as a reader (or a copy) sees it."""
    p = _PreText()
    p.feed(html)
    return p.blocks

"""Snakemake's HTML report (`snakemake --report report.html`) of a tiny real run, opened in headless Chromium.

The report is a React page with every result embedded as a data URI: this clicks through it as a reader
would (category, workload, the eye to view a result, the info button for its caption) and checks that each
plot's PNG decodes and is drawn, and that its caption from workflow/report/*.rst is shown, rendered.
Needs `chromium` and `chromium-driver` (apt) and selenium: without them the tests skip, unless
INFERBENCH_REQUIRE_CHROMIUM=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import REPO
from tests.test_workflow import TINY, snakemake

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # reported by the `browser` fixture: a skip, or a failure in CI
    webdriver = None

pytestmark = pytest.mark.slow

CAPTIONS = REPO / "workflow" / "report"
# what rules plot_batch_sweep and plot_seq_sweep declare with report(): category, subcategory (the
# workload), file and caption; TINY runs mlp_heart (tabular) and distilbert (text, so a sequence sweep too)
PLOTS = [
    ("Latency", "mlp_heart", "latency_per_item.png", "latency_per_item.rst"),
    ("Latency", "distilbert", "latency_per_item.png", "latency_per_item.rst"),
    ("Throughput", "mlp_heart", "throughput.png", "throughput.rst"),
    ("Throughput", "distilbert", "throughput.png", "throughput.rst"),
    ("Sequence length", "distilbert", "latency_vs_seq.png", "latency_vs_seq.rst"),
]
CATEGORIES = {"Latency", "Throughput", "Sequence length", "Summary"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NATURAL_SIZE = "const i = arguments[0]; return i.complete && i.naturalWidth > 0 && [i.naturalWidth, i.naturalHeight];"
# the image as Chromium decoded it, drawn on a canvas: how many pixels are opaque, and the sum of R, G and B
PIXELS = """
const img = arguments[0], canvas = document.createElement("canvas");
canvas.width = img.naturalWidth;
canvas.height = img.naturalHeight;
const context = canvas.getContext("2d");
context.drawImage(img, 0, 0);
const px = context.getImageData(0, 0, canvas.width, canvas.height).data;
let opaque = 0, sum = 0;
for (let i = 0; i < px.length; i += 4) {
    opaque += px[i + 3] === 255;
    sum += px[i] + px[i + 1] + px[i + 2];
}
return [opaque, sum];
"""


def _unavailable(reason: str) -> None:
    if os.environ.get("INFERBENCH_REQUIRE_CHROMIUM") == "1":  # CI: the report must really be looked at
        pytest.fail(f"INFERBENCH_REQUIRE_CHROMIUM=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through the system chromedriver (Selenium Manager never downloads a browser)."""
    if webdriver is None:
        _unavailable("selenium is not installed (pip install -e '.[test]')")
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        _unavailable("chromium or chromedriver is not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"]:
        options.add_argument(arg)  # --no-sandbox: tests run as root in CI
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    yield chrome
    chrome.quit()


@pytest.fixture(scope="module")
def report(browser, tmp_path_factory) -> Path:
    """The tiny run's workdir, with report.html made by the documented command line.

    Takes the browser first, so that without Chromium the tests skip before the workflow runs. A module's
    fixture is set up before conftest's function-scoped `private_lock`, so it points the lock aside itself.
    """
    workdir = tmp_path_factory.mktemp("wf")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("INFERBENCH_LOCK_FILE", str(tmp_path_factory.getbasetemp() / "inferbench-test.lock"))
        snakemake(workdir, TINY, dryrun=False)  # writes config/config.yaml, which the Snakefile reads
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--report", "report.html"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (workdir / "report.html").stat().st_size > 0
    return workdir


def open_report(browser, workdir: Path) -> None:
    browser.get((workdir / "report.html").as_uri())
    browser.get_log("browser")  # empties the log: each test checks what its own page load logged
    wait(browser, lambda b: b.find_elements(By.XPATH, "//nav//a[normalize-space()='Workflow']"), "the menu")


def wait(browser, condition, what: str, timeout: float = 15, poll: float = 0.1):
    return WebDriverWait(browser, timeout, poll_frequency=poll).until(condition, f"report never showed {what}")


def click(browser, element: WebElement, what: str) -> None:
    """Click like a reader, once ``element`` stands still: the menu's items grow into place just after loading
    (Tailwind's styles come in, `transition-all` animates them), and a click aimed meanwhile can miss."""
    rects = []

    def settled(_) -> bool:
        rects.append(element.rect)
        return len(rects) > 1 and rects[-1] == rects[-2]

    wait(browser, settled, f"{what} settled", poll=0.2)
    element.click()


def click_menu_item(browser, label: str) -> None:
    """Click a folder of the navigation (a category, then a workload) by its label."""
    xpath = f"//nav//ul/li/a[normalize-space()='{label}']"
    what = f"the menu item {label!r}"
    click(browser, wait(browser, lambda b: b.find_elements(By.XPATH, xpath), what)[0], what)


def menu_items(browser) -> list[str]:
    return [a.text.strip() for a in browser.find_elements(By.XPATH, "//nav//ul/li/a")]


def result_row(browser, path: str) -> WebElement:
    xpath = f"//nav//table//tr[td[normalize-space()='{path}']]"
    return wait(browser, lambda b: b.find_elements(By.XPATH, xpath), f"a row for {path}")[0]


def embedded_bytes(data_uri: str) -> bytes:
    head, _, payload = data_uri.partition(",")
    assert head.endswith(";base64"), head[:200]
    return base64.b64decode(payload)


def shown_caption(browser, row: WebElement) -> str:
    """Open a result's info (the `i` button of its row) and return the caption's text as shown."""
    click(browser, row.find_element(By.XPATH, ".//a[@iconname='information-circle']"), "the info button")
    wait(browser, lambda b: b.find_elements(By.XPATH, "//nav//*[normalize-space()='Description']"), "Description")
    caption = browser.find_element(By.XPATH, "//nav//li[contains(@class, 'prose')]")
    assert caption.is_displayed()
    return " ".join(caption.text.split())


def expected_caption(rst: str, workload: str | None = None) -> str:
    """The caption's text once Snakemake has rendered it: jinja filled in, reStructuredText markup gone."""
    text = (CAPTIONS / rst).read_text()
    if workload is not None:
        text = re.sub(r"\{\{\s*snakemake\.wildcards\.workload\s*\}\}", workload, text)
    assert "{{" not in text and "{%" not in text, f"{rst} uses jinja this test does not fill in"
    return " ".join(text.replace("``", "").split())


def assert_no_console_errors(browser) -> None:
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def test_report_lists_the_result_categories_and_the_summary(browser, report):
    open_report(browser, report)
    items = menu_items(browser)
    assert set(items) >= CATEGORIES, items
    assert browser.find_elements(By.XPATH, "//nav//*[normalize-space()='Results']")

    click_menu_item(browser, "Latency")  # two workloads: a folder each
    wait(browser, lambda b: {"mlp_heart", "distilbert"} <= set(menu_items(b)), "the workloads of Latency")
    open_report(browser, report)
    click_menu_item(browser, "Sequence length")  # one workload: straight to its table
    result_row(browser, "results/plots/distilbert/latency_vs_seq.png")
    assert not browser.find_elements(By.XPATH, "//nav//table//td[contains(., 'mlp_heart')]")  # tabular: no sweep

    open_report(browser, report)
    click_menu_item(browser, "Summary")  # no subcategory: straight to its table
    row = result_row(browser, "results/summary.csv")
    download = row.find_element(By.XPATH, ".//a[@iconname='eye']")  # not an image: a download link
    assert download.get_attribute("download") == "summary.csv"
    assert embedded_bytes(download.get_attribute("href")) == (report / "results" / "summary.csv").read_bytes()
    assert shown_caption(browser, row) == expected_caption("summary.rst")
    assert_no_console_errors(browser)


@pytest.mark.parametrize(("category", "workload", "name", "rst"), PLOTS)
def test_report_shows_each_plot_and_its_caption(browser, report, category, workload, name, rst):
    path = f"results/plots/{workload}/{name}"
    png = (report / path).read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk follows the signature

    open_report(browser, report)
    click_menu_item(browser, category)
    if sum(c == category for c, *_ in PLOTS) > 1:  # a folder per workload; a category of one has none
        click_menu_item(browser, workload)
    row = result_row(browser, path)
    click(browser, row.find_element(By.XPATH, ".//a[@iconname='eye']"), f"the view button of {path}")

    img = wait(browser, lambda b: b.find_elements(By.XPATH, "//img[not(ancestor::nav)]"), f"the image of {path}")[0]
    assert embedded_bytes(img.get_attribute("src")) == png  # this plot, not another one
    natural = wait(browser, lambda b: b.execute_script(NATURAL_SIZE, img), f"{path} decoded")
    assert natural == [width, height]
    assert img.is_displayed() and img.size["width"] > 0 and img.size["height"] > 0
    # a truncated PNG still gets its size from the header and is drawn in part: compare the pixels
    opaque, rgb_sum = browser.execute_script(PIXELS, img)
    assert opaque == width * height  # matplotlib's white background: a pixel not drawn is transparent
    pixels = np.asarray(Image.open(report / path).convert("RGBA"), dtype=np.int64)
    assert rgb_sum == int(pixels[..., :3].sum())  # Chromium decoded the same pixels as Pillow

    caption = shown_caption(browser, result_row(browser, path))
    assert caption == expected_caption(rst, workload)
    assert workload in caption
    assert_no_console_errors(browser)

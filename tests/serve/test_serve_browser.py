"""The web page in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by selenium): type a
caption and see the right photo first, upload a photo, click "more like this", see a bad upload's message.
Skips cleanly where no browser is installed (`.ci/run` installs one)."""
from __future__ import annotations

import shutil

import pytest

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")
from PIL import Image, ImageStat

from engine.serve.options import ServeOptions
from engine.serve.server import running


BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture()
def browser():
    binary = next((b for b in map(shutil.which, BROWSERS) if b), None)
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.skip("no chromium/chromedriver installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def first_hit(driver) -> str | None:
    """Read in one script: results re-rendered between a find and a read would be stale elements."""
    return driver.execute_script("const h = document.querySelector('#results .hit'); return h && h.dataset.id")


def test_search_upload_more_like_this_and_a_bad_upload(browser, served_root, sample_photos, tmp_path):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select
    with running(ServeOptions(root=served_root)) as url:
        browser.get(url + "/")
        wait(browser, lambda d: "demo" in [o.get_attribute("value") for o in
                                           d.find_elements("css selector", "#collection option")])
        Select(browser.find_element("id", "collection")).select_by_value("demo")
        Select(browser.find_element("id", "k")).select_by_visible_text("5")

        query = browser.find_element("id", "query")
        query.send_keys("a cat", Keys.ENTER)
        wait(browser, lambda d: first_hit(d) == "chelsea")
        assert len(browser.find_elements("css selector", "#results .hit")) == 5
        assert "ms" in browser.find_element("id", "status").text
        wait(browser, lambda d: d.execute_script(
            "return [...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)"))

        browser.find_element("id", "file").send_keys(str(sample_photos["rocket"]))
        wait(browser, lambda d: "rocket.jpg" in d.find_element("id", "status").text)
        assert first_hit(browser) == "rocket"

        second = browser.find_elements("css selector", "#results .hit")[1]
        target = second.get_attribute("data-id")
        second.click()
        wait(browser, lambda d: f"more like {target}" in d.find_element("id", "status").text)
        assert first_hit(browser) == target
        wait(browser, lambda d: d.execute_script(
            "return [...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)"))
        shot = tmp_path / "page.png"
        assert browser.save_screenshot(str(shot))

        bad = tmp_path / "holiday.png"
        bad.write_text("this is not a picture")
        browser.find_element("id", "file").send_keys(str(bad))
        error = browser.find_element("id", "error")
        wait(browser, lambda d: error.is_displayed() and "not an image" in error.text)
        browser.save_screenshot(str(tmp_path / "error.png"))

    image = Image.open(shot).convert("RGB")
    assert image.size[0] >= 1000
    spread = ImageStat.Stat(image.convert("L")).stddev[0]
    colours = len(image.getcolors(maxcolors=1 << 20) or [])
    assert spread > 20 and colours > 1000, (spread, colours)  # photos on the page, not a blank screen


def hits_text(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#results .hit')]"
                                 ".map(h => h.innerText.split('\\n')[0])")


def test_the_url_holds_the_search_and_the_page_fits_the_collection(browser, served_root, tmp_path):
    """A link `/?collection=…&q=…&k=…` runs that search; each search is pushed to the history (back returns
    to the previous one); text results are numbered once; the drop zone only for collections that take
    images; the first image collection is the default (not the first name: `a-docs` is a text collection)."""
    root = tmp_path / "root"
    root.mkdir()
    for link, name in (("a-docs", "docs"), ("demo", "demo")):
        (root / link).symlink_to(served_root / name, target_is_directory=True)
    with running(ServeOptions(root=root)) as url:
        browser.get(url + "/")
        wait(browser, lambda d: len(d.find_elements("css selector", "#collection option")) == 2)
        assert browser.find_element("id", "collection").get_attribute("value") == "demo"
        assert browser.find_element("id", "drop").is_displayed()
        browser.save_screenshot(str(tmp_path / "default.png"))

        browser.get(url + "/?collection=a-docs&q=deep+learning+backprop&k=3")
        wait(browser, lambda d: first_hit(d) == "d6")
        assert browser.find_element("id", "query").get_attribute("value") == "deep learning backprop"
        assert browser.find_element("id", "k").get_attribute("value") == "3"
        assert not browser.find_element("id", "drop").is_displayed()
        lines = hits_text(browser)
        assert len(lines) == 3 and lines[0].startswith("1. d6") and not lines[0].startswith("1. 1.")
        assert browser.execute_script("return getComputedStyle(document.querySelector('#results ol')).listStyleType")\
            == "none"
        browser.save_screenshot(str(tmp_path / "text.png"))

        from selenium.webdriver.common.keys import Keys
        query = browser.find_element("id", "query")
        query.clear()
        query.send_keys("bread", Keys.ENTER)
        wait(browser, lambda d: first_hit(d) == "d1" and "q=bread" in d.current_url)
        browser.find_elements("css selector", "#results .hit")[1].click()  # more like this: in the URL too
        wait(browser, lambda d: "id=" in d.current_url and "more like" in d.find_element("id", "status").text)
        browser.back()
        wait(browser, lambda d: "q=bread" in d.current_url and first_hit(d) == "d1")
        browser.back()
        wait(browser, lambda d: "q=deep+learning" in d.current_url and first_hit(d) == "d6")
        assert browser.find_element("id", "query").get_attribute("value") == "deep learning backprop"
        browser.forward()
        wait(browser, lambda d: first_hit(d) == "d1")

        browser.get(url + "/?collection=demo&q=a+cat&k=5")
        wait(browser, lambda d: first_hit(d) == "chelsea")
        assert len(browser.find_elements("css selector", "#results .hit")) == 5
        assert browser.find_element("id", "drop").is_displayed()
        wait(browser, lambda d: d.execute_script(
            "return [...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)"))
        browser.save_screenshot(str(tmp_path / "image.png"))

        browser.get(url + "/?collection=nope&q=x")
        error = browser.find_element("id", "error")
        wait(browser, lambda d: error.is_displayed() and "nope" in error.text)


def result_ids(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#results .hit')].map(h => h.dataset.id)")


def test_mode_fusion_and_filter_controls_live_in_the_url(browser, served_root):
    """The options controls (mode, fusion, filter; rerank when the server allows one) are sent with a text
    search and kept in the URL: a link with them runs that search and sets the controls, changing them in
    the page puts them in the next URL, back restores them, and a bad filter is the server's one red line."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select
    with running(ServeOptions(root=served_root)) as url:
        browser.get(url + "/?collection=docs&q=food&k=5&mode=dense&where=topic+%3D%3D+%22cooking%22")
        wait(browser, lambda d: sorted(result_ids(d)) == ["d1", "d5"])
        assert browser.find_element("id", "mode").get_attribute("value") == "dense"
        assert browser.find_element("id", "where").get_attribute("value") == 'topic == "cooking"'
        assert not browser.find_element("id", "rerank-box").is_displayed()  # the server allows no reranker

        Select(browser.find_element("id", "mode")).select_by_value("")
        Select(browser.find_element("id", "fusion")).select_by_value("rrf")
        where = browser.find_element("id", "where")
        where.clear()
        where.send_keys('topic == "history"')
        query = browser.find_element("id", "query")
        query.clear()
        query.send_keys("castles", Keys.ENTER)
        wait(browser, lambda d: "fusion=rrf" in d.current_url and "where=topic" in d.current_url
             and "mode=" not in d.current_url and sorted(result_ids(d)) == ["d3", "d7"])

        browser.find_elements("css selector", "#results .hit")[0].click()  # more like this keeps the filter
        wait(browser, lambda d: "id=" in d.current_url and "more like" in d.find_element("id", "status").text)
        assert set(result_ids(browser)) <= {"d3", "d7"}

        browser.back()
        browser.back()
        wait(browser, lambda d: sorted(result_ids(d)) == ["d1", "d5"]
             and d.find_element("id", "mode").get_attribute("value") == "dense")
        assert browser.find_element("id", "fusion").get_attribute("value") == "weighted"

        browser.get(url + "/?collection=docs&q=food&where=topc+%3D%3D+1")
        error = browser.find_element("id", "error")
        wait(browser, lambda d: error.is_displayed() and "topc" in error.text)


def test_pipeline_picker_runs_a_served_pipeline_and_lives_in_the_url(browser, served_root, sample_photos, tmp_path):
    """With `--pipeline NAME=FILE`, a pipeline picker sits beside the collection picker: a link with
    `?pipeline=NAME` selects it and runs the search through it (image hits with their thumbnails), choosing
    one in the page puts it in the next URL, the filter applies to its first stage, and an unknown pipeline
    is one red line. Without pipelines the picker stays hidden."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    from engine.commands.serve import served_pipelines
    (tmp_path / "photos.toml").write_text("pipeline = 'retrieve(\"demo\", k=16) % 4'\n")
    (tmp_path / "top.toml").write_text("pipeline = 'retrieve(\"docs\", k=7) % 3'\n")
    pipes = served_pipelines([f"photos={tmp_path / 'photos.toml'}", f"top-docs={tmp_path / 'top.toml'}"])
    with running(ServeOptions(root=served_root, pipelines=pipes)) as url:
        browser.get(url + "/?pipeline=photos&q=a+cat&k=5")
        wait(browser, lambda d: first_hit(d) == "chelsea")
        assert browser.find_element("id", "pipeline-box").is_displayed()
        assert browser.find_element("id", "pipeline").get_attribute("value") == "photos"
        assert len(browser.find_elements("css selector", "#results .hit")) == 4  # the pipeline's own cut
        assert browser.find_element("id", "drop").is_displayed()  # its first stage's collection takes images
        assert "photos:" in browser.find_element("id", "status").text
        wait(browser, lambda d: d.execute_script(
            "const i = [...document.querySelectorAll('#results img')]; "
            "return i.length === 4 && i.every(x => x.complete && x.naturalWidth > 0)"))
        browser.save_screenshot(str(tmp_path / "pipeline.png"))
        assert ImageStat.Stat(Image.open(tmp_path / "pipeline.png").convert("L")).stddev[0] > 5

        browser.find_element("id", "file").send_keys(str(sample_photos["rocket"]))  # an upload, through it
        wait(browser, lambda d: first_hit(d) == "rocket" and "photos: image" in d.find_element("id", "status").text)

        Select(browser.find_element("id", "pipeline")).select_by_value("top-docs")
        assert not browser.find_element("id", "drop").is_displayed()
        where = browser.find_element("id", "where")
        where.clear()
        where.send_keys('topic == "ml"')
        query = browser.find_element("id", "query")
        query.clear()
        query.send_keys("deep learning backprop", Keys.ENTER)
        wait(browser, lambda d: "pipeline=top-docs" in d.current_url and result_ids(d) == ["d6", "d2"])
        assert "topic: ml" in browser.execute_script("return document.querySelector('#results .hit .meta').textContent")

        Select(browser.find_element("id", "pipeline")).select_by_value("")
        query = browser.find_element("id", "query")
        query.clear()
        query.send_keys("deep learning backprop", Keys.ENTER)
        wait(browser, lambda d: "pipeline=" not in d.current_url and "q=deep" in d.current_url)

        browser.get(url + "/?pipeline=nope&q=x")
        error = browser.find_element("id", "error")
        wait(browser, lambda d: error.is_displayed() and "nope" in error.text)
    with running(ServeOptions(root=served_root)) as url:
        browser.get(url + "/")
        wait(browser, lambda d: len(d.find_elements("css selector", "#collection option")) == 2)
        assert not browser.find_element("id", "pipeline-box").is_displayed()

/* The site's search: two fixes to Sphinx 7.4's (its _static/searchtools.js).
 *
 * book/_ext/course_search.py makes this file Sphinx's `html_search_scorer`: Sphinx inlines it into
 * _static/language_data.js, which every page loads right after searchtools.js, so `Search` exists here and
 * `Scorer` below replaces Sphinx's. Checked in a browser by tests/test_site.py
 * (test_search_ranks_the_chapter_first_and_quotes_its_text).
 *
 * 1. Ranking. A query word in the page's own title scores the same as one in any of its section titles
 *    (Scorer.title), and ties are sorted by title: "rotary" listed the rotary chapter fifth, after its exercise,
 *    its solution and two chapters with a "rotary" section. A whole page whose own title has every word of the
 *    query now gains up to one more Scorer.title, the share of its title's words that are the query's: "Rotary
 *    position embeddings" (one word in three) before "Exercise 11: rotary position embeddings, and ..." (one in nine).
 * 2. Snippets. Sphinx quotes a result around the first place its text contains a query word *as stemmed*
 *    ("rotari" for "rotary", in no text), else from the start of the theme's main element: the launch and
 *    repository buttons, so every snippet read "...Binder" or "...Repository". A snippet now quotes the page's
 *    article (the theme's buttons, sidebars and footer left out) around the first word whose stem is a query word.
 * 3. Exercises and solutions rank after the chapters (one Scorer.title less), the glossary, the notation and
 *    the references after every other page (100 less: Sphinx scores a glossary term, an index entry, up to 100),
 *    so a word's chapter comes first.
 */

var Scorer = {
  // Sphinx's own weights (searchtools.js), unchanged.
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: {0: 15, 1: 5, 2: -5},
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
  // result: [docname, title, anchor, descr, score, filename]
  score: function (result) {
    var title = result[1], anchor = result[2], descr = result[3], score = result[4];
    var query = CourseSearch.queryStems;
    // 3. Exercises and solutions after the chapters, and the reference pages after everything: a reader looking
    //    up a word wants the chapter that teaches it first ("sink" listed exercise 18 and its solution, then
    //    exercise 9 and its solution; "latent" the glossary, twice, before chapter 17: a glossary term is an
    //    index entry, which Sphinx scores up to 100).
    if (/^(exercises|solutions)\//.test(result[0])) score -= Scorer.title;
    if (/^book\/(glossary|notation|references)$/.test(result[0])) score -= 100;
    if (anchor || descr || !title || query.length === 0) return score;  // whole pages only
    var words = CourseSearch.stems(title);
    var found = query.filter(function (stem) { return words.indexOf(stem) !== -1; }).length;
    return found === query.length ? score + Scorer.title * found / words.length : score;
  },
};

var CourseSearch = {
  queryStems: [],  // the stemmed words of the query being run
  _stemmer: null,

  stem: function (word) {
    if (!CourseSearch._stemmer) CourseSearch._stemmer = new Stemmer();  // language_data.js
    return CourseSearch._stemmer.stemWord(word.toLowerCase());
  },

  stems: function (text) {
    return splitQuery(text).map(CourseSearch.stem);  // splitQuery: searchtools.js, as Sphinx splits a query
  },

  // Where the first word of `text` whose stem is one of `keywords` starts (else a plain match, else 0).
  firstMatch: function (text, keywords) {
    var wanted = Array.from(keywords), stems = new Map(), words = /[\p{Letter}\p{Number}_]+/gu, match;
    while ((match = words.exec(text)) !== null) {
      var word = match[0].toLowerCase();
      if (!stems.has(word)) stems.set(word, CourseSearch.stem(word));
      if (wanted.indexOf(stems.get(word)) !== -1) return match.index;
    }
    var lower = text.toLowerCase();
    var plain = wanted.map(function (k) { return lower.indexOf(k); }).filter(function (i) { return i > -1; });
    return plain.length ? Math.min.apply(null, plain) : 0;
  },

  // Sphinx's makeSearchSummary(htmlText, keywords, anchor), quoting the article: a <p class="context">.
  summary: function (htmlText, keywords, anchor) {
    var page = new DOMParser().parseFromString(htmlText, "text/html");
    page.querySelectorAll(".headerlink, script, style").forEach(function (el) { el.remove(); });
    var article = page.querySelector('[role="main"] article') || page.querySelector('[role="main"]');
    var part = (anchor && page.getElementById(anchor.replace(/^#/, ""))) || article;
    var text = part ? part.textContent.replace(/\s+/g, " ").trim() : "";
    if (text === "") return null;
    var start = Math.max(CourseSearch.firstMatch(text, keywords) - 120, 0);
    var summary = document.createElement("p");
    summary.classList.add("context");
    summary.textContent = (start > 0 ? "..." : "") + text.substr(start, 240).trim() +
      (start + 240 < text.length ? "..." : "");
    return summary;
  },
};

if (typeof Search !== "undefined") {
  var sphinxPerformSearch = Search._performSearch;
  Search._performSearch = function (query, searchTerms) {
    CourseSearch.queryStems = Array.from(searchTerms);
    return sphinxPerformSearch.apply(Search, arguments);
  };
  Search.makeSearchSummary = CourseSearch.summary;
}

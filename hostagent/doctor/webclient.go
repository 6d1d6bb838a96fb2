package doctor

import "github.com/invisible-dots/invisible-dots/web"

// RowWebClient: the web client is built into this binary.
const RowWebClient = "web client built"

// webClientBuilt is Deps.WebClientBuilt on the running machine: whether
// this binary embeds the built client or only the page that says to build it.
func webClientBuilt() bool {
	_, built := web.App()
	return built
}

// webClient is the row of the web client. A binary without it still runs
// every Dot: the page it serves says how to build the client, so the row
// warns rather than fails.
func webClient(d Deps) Check {
	if d.WebClientBuilt() {
		return Check{Name: RowWebClient, Status: OK, Detail: "this binary serves the web client"}
	}
	return fix{"make build", "in the checkout this binary was built from: installs the web client's packages (npm ci), builds it and then the binary, which serves it"}.on(
		Check{Name: RowWebClient, Status: Warning, Detail: "this binary was built without the web client; its page says to build it"})
}

package controller

import "net/http"

func (c *Controller) handleOpenAPI(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDocument)
	return nil
}

var openAPIDocument = []byte("{}")

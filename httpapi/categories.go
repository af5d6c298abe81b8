package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
)

// categoryRoutes: merchant-defined escrow categories. They belong to the
// merchant and environment, so customer-id is ignored and any key may
// read or write them.
func (s *Server) categoryRoutes() {
	pol := Policy{CID: CIDIgnored}
	s.handle(http.MethodPost, "/v1/escrow/category/create", pol, s.createCategory)
	s.handle(http.MethodPut, "/v1/escrow/category/edit/:id", pol, s.editCategory)
	s.handle(http.MethodGet, "/v1/escrow/category/get", pol, s.listCategories)
	s.handle(http.MethodGet, "/v1/escrow/category/get/:id", pol, s.getCategory)
	s.handle(http.MethodDelete, "/v1/escrow/category/delete/:id", pol, s.deleteCategory)
}

// ownCategory reads a live category of the caller's merchant and
// environment; anything else is 404 Category not found.
func (s *Server) ownCategory(c echo.Context, id string) (projections.Category, error) {
	p, _ := PrincipalFrom(c)
	q, err := s.readModels(c)
	if err != nil {
		return projections.Category{}, err
	}
	cat, ok, err := q.CategoryByID(c.Request().Context(), id)
	if err != nil {
		return cat, err
	}
	if !ok || cat.MerchantID != p.MerchantID || cat.Environment != string(p.Environment) {
		return cat, category.ErrNotFound
	}
	return cat, nil
}

func (s *Server) createCategory(c echo.Context) error {
	var body struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	id, pos, err := s.app.CreateCategory(c.Request().Context(), actor(c), category.New{Name: body.Name, Description: body.Description})
	if err != nil {
		return err
	}
	return s.respondCategory(c, id, pos, http.StatusCreated, "Category created successfully")
}

func (s *Server) editCategory(c echo.Context) error {
	var body struct {
		Name        *string `json:"name"`
		Description *string `json:"description"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	id := c.Param("id")
	pos, err := s.app.UpdateCategory(c.Request().Context(), actor(c), id, category.Edit{Name: body.Name, Description: body.Description})
	if err != nil {
		return err
	}
	return s.respondCategory(c, id, pos, http.StatusOK, "Category updated successfully")
}

func (s *Server) deleteCategory(c echo.Context) error {
	if _, err := s.app.DeleteCategory(c.Request().Context(), actor(c), c.Param("id")); err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Category deleted successfully", nil)
}

func (s *Server) getCategory(c echo.Context) error {
	cat, err := s.ownCategory(c, c.Param("id"))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Category fetched successfully", cat)
}

func (s *Server) listCategories(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	q, err := s.readModels(c)
	if err != nil {
		return err
	}
	list, pg, err := q.ListCategories(c.Request().Context(), p.MerchantID, p.Environment, pageParams(c, 100))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Categories fetched successfully", map[string]any{"data": list, "pagination": pg})
}

// respondCategory answers a write with the category as the read model holds
// it once it includes the write.
func (s *Server) respondCategory(c echo.Context, id string, pos eventstore.Position, status int, msg string) error {
	if err := s.settle(c, pos); err != nil {
		return err
	}
	cat, err := s.ownCategory(c, id)
	if err != nil {
		return err
	}
	return respond(c, status, msg, cat)
}
